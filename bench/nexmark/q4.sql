-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q4.sql
-- q4: average price for a category. The winning (highest) bid of each auction made while the
-- auction was open, averaged per category: a join (keys A.id = B.auction, the time condition
-- residual), a GROUP BY over it, and a GROUP BY over that, whose input is updating. AVG of a
-- BIGINT is a BIGINT (truncated toward zero), as in Flink.
CREATE TABLE discard_sink (
    id BIGINT,
    final BIGINT
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    Q.category,
    AVG(Q.final)
FROM (
    SELECT MAX(B.price) AS final, A.category
    FROM auction A, bid B
    WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
    GROUP BY A.id, A.category
) Q
GROUP BY Q.category;
