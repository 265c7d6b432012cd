-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q5.sql
-- q5: hot items. The auctions with the most bids in each 10-second window, every 2 seconds: the
-- bids per auction and window (HOP), joined on the window with the most bids of the window
-- (a GROUP BY over the window results: planned as a window aggregation, one row per window).
CREATE TABLE discard_sink (
    auction BIGINT,
    num BIGINT
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT AuctionBids.auction, AuctionBids.num
FROM (
    SELECT
        auction,
        COUNT(*) AS num,
        window_start AS starttime,
        window_end AS endtime
    FROM TABLE(
        HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end
) AS AuctionBids
JOIN (
    SELECT
        MAX(CountBids.num) AS maxn,
        CountBids.starttime,
        CountBids.endtime
    FROM (
        SELECT
            COUNT(*) AS num,
            window_start AS starttime,
            window_end AS endtime
        FROM TABLE(
            HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
        GROUP BY auction, window_start, window_end
    ) AS CountBids
    GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime AND
   AuctionBids.endtime = MaxBids.endtime AND
   AuctionBids.num >= MaxBids.maxn;
