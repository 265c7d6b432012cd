-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q13.sql
-- q13: bounded side input join. Each bid with a value looked up in a file (side_input.csv:
-- keys 0..9999) by its auction: a lookup join (FOR SYSTEM_TIME AS OF a processing-time
-- attribute), whose side table is read whole before bids are matched and is not kept for them.
CREATE TABLE side_input (
    key BIGINT,
    `value` STRING
) WITH (
    'connector' = 'filesystem',
    'path' = 'bench/nexmark/side_input.csv',
    'format' = 'csv'
);

CREATE TABLE discard_sink (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    dateTime TIMESTAMP(3),
    `value` STRING
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    B.auction,
    B.bidder,
    B.price,
    B.dateTime,
    S.`value`
FROM (SELECT *, PROCTIME() AS p_time FROM bid) B
JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S
ON MOD(B.auction, 10000) = S.key;
