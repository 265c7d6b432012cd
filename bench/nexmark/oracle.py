"""The Nexmark queries of this folder in DuckDB's dialect, over tables ``person``, ``auction``
and ``bid`` with the columns of the views of the same names (``bid`` also with ``file_row_number``, its
position in the stream), and ``side_input`` (``side_input.csv``): the reference for ``tests/runtime/test_nexmark.py`` (same rows) and for
``bench/nexmark.py`` (batch time over the same events).

Where the dialects differ the DuckDB text gives Flink's answer: AVG of a BIGINT is a BIGINT
truncated toward zero (``SUM(x) // COUNT(x)``; DuckDB's AVG is a DOUBLE), ``''`` becomes NULL where DuckDB's string functions return
an empty string for no match. Windows are computed from ``epoch_ms``: a TUMBLE of 10 s is
``epoch_ms(dateTime) // 10000``, a HOP of 10 s every 2 s puts each bid in the five windows
starting at ``epoch_ms(dateTime) // 2000 * 2000 - k * 2000`` for k = 0..4.
"""

#: The DuckDB view of q13's side input (``path``: side_input.csv).
SIDE_INPUT = ("CREATE VIEW side_input AS SELECT * FROM read_csv('{path}', header = false, "
              "columns = {{'key': 'BIGINT', 'value': 'VARCHAR'}})")

QUERIES = {
    "q0": "SELECT auction, bidder, price, dateTime, extra FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid",
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
        SELECT auction, bidder, 0.908 * price,
               CASE WHEN hour(dateTime) >= 8 AND hour(dateTime) <= 18 THEN 'dayTime'
                    WHEN hour(dateTime) <= 6 OR hour(dateTime) >= 20 THEN 'nightTime'
                    ELSE 'otherTime' END,
               dateTime, extra, length(extra) - length(replace(extra, 'c', ''))
        FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000""",
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
               MIN(price), MAX(price), (SUM(price) // COUNT(price))::BIGINT, SUM(price)::BIGINT
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
    "q3": """
        SELECT P.name, P.city, P.state, A.id
        FROM auction A JOIN person P ON A.seller = P.id
        WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')""",
    "q4": """
        SELECT Q.category, (SUM(Q.final) // COUNT(Q.final))::BIGINT
        FROM (SELECT MAX(B.price) AS final, A.category
              FROM auction A, bid B
              WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
              GROUP BY A.id, A.category) Q
        GROUP BY Q.category""",
    "q5": """
        WITH windows AS (
            SELECT auction, epoch_ms(dateTime) // 2000 * 2000 - k * 2000 AS ws FROM bid, range(5) t(k)),
        auction_bids AS (SELECT auction, ws, COUNT(*) AS num FROM windows GROUP BY auction, ws),
        max_bids AS (SELECT ws, MAX(num) AS maxn FROM auction_bids GROUP BY ws)
        SELECT a.auction, a.num FROM auction_bids a JOIN max_bids m ON a.ws = m.ws AND a.num >= m.maxn""",
    # The winning bids as in q9; each seller's are ordered by time, then by position in the stream.
    "q6": """
        WITH winners AS (
            SELECT seller, final, dateTime, bid_row
            FROM (SELECT A.seller, B.price AS final, B.dateTime, B.file_row_number AS bid_row,
                         ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY B.price DESC, B.dateTime ASC,
                                            B.file_row_number) AS rownum
                  FROM auction A, bid B
                  WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires)
            WHERE rownum <= 1)
        SELECT seller, (SUM(final) OVER w // COUNT(final) OVER w)::BIGINT
        FROM winners
        WINDOW w AS (PARTITION BY seller ORDER BY dateTime, bid_row ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)""",
    "q7": """
        WITH b1 AS (SELECT MAX(price) AS maxprice, epoch_ms(dateTime) // 10000 * 10000 + 10000 AS we
                    FROM bid GROUP BY epoch_ms(dateTime) // 10000)
        SELECT B.auction, B.price, B.bidder, B.dateTime, B.extra
        FROM bid B JOIN b1 ON B.price = b1.maxprice
        WHERE epoch_ms(B.dateTime) BETWEEN b1.we - 10000 AND b1.we""",
    "q8": """
        SELECT P.id, P.name, make_timestamp(P.w * 10000 * 1000)
        FROM (SELECT id, name, epoch_ms(dateTime) // 10000 AS w FROM person GROUP BY ALL) P
        JOIN (SELECT seller, epoch_ms(dateTime) // 10000 AS w FROM auction GROUP BY ALL) A
        ON P.id = A.seller AND P.w = A.w""",
    "q20": """
        SELECT auction, bidder, price, channel, url, B.dateTime, B.extra, itemName, description, initialBid,
               reserve, A.dateTime, expires, seller, category, A.extra
        FROM bid B JOIN auction A ON B.auction = A.id
        WHERE A.category = 10""",
    # Ties in a ROW_NUMBER order go to the earlier row: the bid view's file_row_number.
    "q9": """
        SELECT id, itemName, description, initialBid, reserve, dateTime, expires, seller, category, extra,
               auction, bidder, price, bid_dateTime, bid_extra
        FROM (SELECT A.*, B.auction, B.bidder, B.price, B.dateTime AS bid_dateTime, B.extra AS bid_extra,
                     ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.dateTime ASC,
                                        B.file_row_number) AS rownum
              FROM auction A, bid B
              WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires)
        WHERE rownum <= 1""",
    "q18": """
        SELECT auction, bidder, price, channel, url, dateTime, extra
        FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY dateTime DESC, file_row_number)
                        AS rank_number FROM bid)
        WHERE rank_number <= 1""",
    "q19": """
        SELECT auction, bidder, price, channel, url, dateTime, extra, rank_number
        FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC, file_row_number)
                        AS rank_number FROM bid)
        WHERE rank_number <= 10""",
    "q13": """
        SELECT B.auction, B.bidder, B.price, B.dateTime, S.value
        FROM bid B JOIN side_input S ON B.auction % 10000 = S.key""",
}
