"""The Nexmark queries of this folder in DuckDB's dialect, over a table ``bid`` with the bid
view's columns: the reference for ``tests/runtime/test_nexmark.py`` (same rows) and for
``bench/nexmark.py`` (batch time over the same events).

Where the dialects differ the DuckDB text gives Flink's answer: ``0.908`` is cast to DOUBLE
(DuckDB would compute in DECIMAL), ``''`` becomes NULL where DuckDB's string functions return
an empty string for no match.
"""

QUERIES = {
    "q0": "SELECT auction, bidder, price, dateTime, extra FROM bid",
    "q1": "SELECT auction, bidder, CAST(0.908 AS DOUBLE) * price AS price, dateTime, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    "q10": """
        SELECT auction, bidder, price, dateTime, extra, strftime(dateTime, '%Y-%m-%d'), strftime(dateTime, '%H:%M')
        FROM bid""",
    # Sessions as gaps and islands: a bid at least 10 s after the bidder's previous one opens a new
    # session; a session ends 10 s after its last bid.
    "q11": """
        WITH marked AS (
            SELECT bidder, dateTime,
                   CASE WHEN dateTime - LAG(dateTime) OVER w < INTERVAL 10 SECOND THEN 0 ELSE 1 END AS opens
            FROM bid WINDOW w AS (PARTITION BY bidder ORDER BY dateTime)),
        numbered AS (
            SELECT bidder, dateTime,
                   SUM(opens) OVER (PARTITION BY bidder ORDER BY dateTime ROWS UNBOUNDED PRECEDING) AS session
            FROM marked)
        SELECT bidder, COUNT(*), MIN(dateTime), MAX(dateTime) + INTERVAL 10 SECOND
        FROM numbered GROUP BY bidder, session""",
    "q14": """
        SELECT auction, bidder, CAST(0.908 AS DOUBLE) * price,
               CASE WHEN hour(dateTime) >= 8 AND hour(dateTime) <= 18 THEN 'dayTime'
                    WHEN hour(dateTime) <= 6 OR hour(dateTime) >= 20 THEN 'nightTime'
                    ELSE 'otherTime' END,
               dateTime, extra, length(extra) - length(replace(extra, 'c', ''))
        FROM bid WHERE CAST(0.908 AS DOUBLE) * price > 1000000 AND CAST(0.908 AS DOUBLE) * price < 50000000""",
    "q15": """
        SELECT strftime(dateTime, '%Y-%m-%d'),
               COUNT(*), COUNT(*) FILTER (WHERE price < 10000),
               COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000),
               COUNT(*) FILTER (WHERE price >= 1000000),
               COUNT(DISTINCT bidder), COUNT(DISTINCT bidder) FILTER (WHERE price < 10000),
               COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000),
               COUNT(DISTINCT bidder) FILTER (WHERE price >= 1000000),
               COUNT(DISTINCT auction), COUNT(DISTINCT auction) FILTER (WHERE price < 10000),
               COUNT(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000),
               COUNT(DISTINCT auction) FILTER (WHERE price >= 1000000)
        FROM bid GROUP BY strftime(dateTime, '%Y-%m-%d')""",
    "q16": """
        SELECT channel, strftime(dateTime, '%Y-%m-%d'), MAX(strftime(dateTime, '%H:%M')),
               COUNT(*), COUNT(*) FILTER (WHERE price < 10000),
               COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000),
               COUNT(*) FILTER (WHERE price >= 1000000),
               COUNT(DISTINCT bidder), COUNT(DISTINCT bidder) FILTER (WHERE price < 10000),
               COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000),
               COUNT(DISTINCT bidder) FILTER (WHERE price >= 1000000),
               COUNT(DISTINCT auction), COUNT(DISTINCT auction) FILTER (WHERE price < 10000),
               COUNT(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000),
               COUNT(DISTINCT auction) FILTER (WHERE price >= 1000000)
        FROM bid GROUP BY channel, strftime(dateTime, '%Y-%m-%d')""",
    "q17": """
        SELECT auction, strftime(dateTime, '%Y-%m-%d'), COUNT(*),
               COUNT(*) FILTER (WHERE price < 10000),
               COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000),
               COUNT(*) FILTER (WHERE price >= 1000000),
               MIN(price), MAX(price), AVG(price), SUM(price)::BIGINT
        FROM bid GROUP BY auction, strftime(dateTime, '%Y-%m-%d')""",
    # DuckDB's regexp_extract gives '' where Flink's REGEXP_EXTRACT gives NULL.
    "q21": """
        SELECT auction, bidder, price, channel,
               CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1'
                    WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3'
                    ELSE NULLIF(regexp_extract(url, '(&|^)channel_id=([^&]*)', 2), '') END
        FROM bid
        WHERE NULLIF(regexp_extract(url, '(&|^)channel_id=([^&]*)', 2), '') IS NOT NULL
           OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')""",
    # split_part counts from 1 and gives '' past the end, SPLIT_INDEX from 0 and NULL.
    "q22": """
        SELECT auction, bidder, price, channel, NULLIF(split_part(url, '/', 4), ''),
               NULLIF(split_part(url, '/', 5), ''), NULLIF(split_part(url, '/', 6), '')
        FROM bid""",
}
