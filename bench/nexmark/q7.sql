-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q7.sql
-- q7: highest bid. The bids that are the highest of their 10-second window: bids joined on price
-- with each window's maximum (a TUMBLE aggregate), the bid's time within the window.
CREATE TABLE discard_sink (
    auction BIGINT,
    price BIGINT,
    bidder BIGINT,
    dateTime TIMESTAMP(3),
    extra STRING
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT B.auction, B.price, B.bidder, B.dateTime, B.extra
FROM bid B
JOIN (
    SELECT MAX(price) AS maxprice, window_end AS dateTime
    FROM TABLE(
        TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
    GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.dateTime BETWEEN B1.dateTime - INTERVAL '10' SECOND AND B1.dateTime;
