-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q1.sql
-- q1: currency conversion. Bid prices from dollars to euros.
-- nexmark-flink declares the price DECIMAL(23, 3); clink types 0.908 * price as DOUBLE and does
-- not cast DOUBLE to DECIMAL on INSERT, so the column is DOUBLE here.
CREATE TABLE discard_sink (
    auction BIGINT,
    bidder BIGINT,
    price DOUBLE,
    dateTime TIMESTAMP(3),
    extra STRING
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid;
