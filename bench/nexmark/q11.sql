-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q11.sql
-- q11: user sessions. How many bids each bidder made in each session they were active:
-- sessions of one bidder's bids at most 10 seconds apart.
CREATE TABLE discard_sink (
    bidder BIGINT,
    bid_count BIGINT,
    starttime TIMESTAMP(3),
    endtime TIMESTAMP(3)
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    B.bidder,
    COUNT(*) AS bid_count,
    SESSION_START(B.dateTime, INTERVAL '10' SECOND) AS starttime,
    SESSION_END(B.dateTime, INTERVAL '10' SECOND) AS endtime
FROM bid B
GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND);
