-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q14.sql
-- q14: calculation. Classifies each bid's time of day and counts a character in its extra
-- field with a Python function (nexmark_udfs.py next to this file; bench/nexmark.py puts this
-- folder on the Python path, by hand: PYTHONPATH=bench/nexmark clink run bench/nexmark/q14.sql).
-- The price is an exact DECIMAL(23, 3), as in q1.
CREATE FUNCTION count_char AS 'nexmark_udfs.count_char' LANGUAGE PYTHON;

CREATE TABLE discard_sink (
    auction BIGINT,
    bidder BIGINT,
    price DECIMAL(23, 3),
    bidTimeType STRING,
    dateTime TIMESTAMP(3),
    extra STRING,
    c_counts BIGINT
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    auction,
    bidder,
    0.908 * price AS price,
    CASE
        WHEN HOUR(dateTime) >= 8 AND HOUR(dateTime) <= 18 THEN 'dayTime'
        WHEN HOUR(dateTime) <= 6 OR HOUR(dateTime) >= 20 THEN 'nightTime'
        ELSE 'otherTime'
    END AS bidTimeType,
    dateTime,
    extra,
    count_char(extra, 'c') AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000;
