-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q2.sql
-- q2: selection. The bids on auctions whose id is a multiple of 123.
CREATE TABLE discard_sink (
    auction BIGINT,
    price BIGINT
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0;
