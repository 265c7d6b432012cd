-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q6.sql
-- q6: average selling price by seller. The average winning price of each seller's last 10
-- closed auctions (the current one and the 10 before it). nexmark-flink's text groups by
-- A.id, A.seller and selects B.dateTime, which is not grouped; here, as in other engines'
-- Nexmark suites, the winning bid of each auction is its highest bid while it is open (q9's
-- ROW_NUMBER kept to 1), with its own dateTime. The OVER aggregation runs over that updating
-- result: when a higher bid wins an auction, the averages that included the old winner are
-- revised.
CREATE TABLE discard_sink (
    seller BIGINT,
    avg_price BIGINT
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    Q.seller,
    AVG(Q.final) OVER
        (PARTITION BY Q.seller ORDER BY Q.dateTime ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
FROM (
    SELECT A.seller, B.price AS final, B.dateTime,
        ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY B.price DESC, B.dateTime ASC) AS rownum
    FROM auction AS A, bid AS B
    WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
) AS Q
WHERE Q.rownum <= 1;
