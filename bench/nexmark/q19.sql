-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q19.sql
-- q19: auction top-K. The ten highest bids of each auction, with their rank: ROW_NUMBER per
-- auction by price, kept to 10 (Top-N). Equal prices rank in arrival order.
CREATE TABLE discard_sink (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    channel STRING,
    url STRING,
    dateTime TIMESTAMP(3),
    extra STRING,
    rank_number BIGINT
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT * FROM
(SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid)
WHERE rank_number <= 10;
