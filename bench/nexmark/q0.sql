-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q0.sql
-- q0: pass-through. Measures the cost of reading and writing the bids.
CREATE TABLE discard_sink (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    dateTime TIMESTAMP(3),
    extra STRING
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT auction, bidder, price, dateTime, extra FROM bid;
