-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q1.sql
-- q1: currency conversion. Bid prices from dollars to euros.
-- 0.908 is a DECIMAL(3, 3) and price a BIGINT, so 0.908 * price is an exact DECIMAL(23, 3), the
-- type nexmark-flink declares for the sink's price.
CREATE TABLE discard_sink (
    auction BIGINT,
    bidder BIGINT,
    price DECIMAL(23, 3),
    dateTime TIMESTAMP(3),
    extra STRING
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid;
