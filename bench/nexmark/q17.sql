-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q17.sql
-- q17: auction statistics report. Bids per auction and day, by price range, with the price's
-- minimum, maximum, average and sum: a GROUP BY without a window, so an updating query (each bid
-- revises its group's row). AVG of a BIGINT is a BIGINT (truncated toward zero), as in Flink.
CREATE TABLE discard_sink (
    auction BIGINT,
    `day` STRING,
    total_bids BIGINT,
    rank1_bids BIGINT,
    rank2_bids BIGINT,
    rank3_bids BIGINT,
    min_price BIGINT,
    max_price BIGINT,
    avg_price BIGINT,
    sum_price BIGINT
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    auction,
    DATE_FORMAT(dateTime, 'yyyy-MM-dd') AS `day`,
    COUNT(*) AS total_bids,
    COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
    COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
    COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
    MIN(price) AS min_price,
    MAX(price) AS max_price,
    AVG(price) AS avg_price,
    SUM(price) AS sum_price
FROM bid
GROUP BY auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd');
