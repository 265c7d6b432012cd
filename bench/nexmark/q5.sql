-- Nexmark: the event table and the person, auction and bid views, as in the nexmark-flink
-- benchmark. Each qN.sql in this folder begins with this text, unchanged (a test checks it).
CREATE TABLE datagen (
    event_type INT,
    person ROW<
        id BIGINT,
        name STRING,
        emailAddress STRING,
        creditCard STRING,
        city STRING,
        state STRING,
        dateTime TIMESTAMP(3),
        extra STRING>,
    auction ROW<
        id BIGINT,
        itemName STRING,
        description STRING,
        initialBid BIGINT,
        reserve BIGINT,
        dateTime TIMESTAMP(3),
        expires TIMESTAMP(3),
        seller BIGINT,
        category BIGINT,
        extra STRING>,
    bid ROW<
        auction BIGINT,
        bidder BIGINT,
        price BIGINT,
        channel STRING,
        url STRING,
        dateTime TIMESTAMP(3),
        extra STRING>,
    dateTime AS
        CASE
            WHEN event_type = 0 THEN person.dateTime
            WHEN event_type = 1 THEN auction.dateTime
            ELSE bid.dateTime
        END,
    WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (
    'connector' = 'nexmark',
    'first-event.rate' = '10000',
    'next-event.rate' = '10000',
    'events.num' = '10000000'
);

CREATE VIEW person AS
SELECT
    person.id,
    person.name,
    person.emailAddress,
    person.creditCard,
    person.city,
    person.state,
    dateTime,
    person.extra
FROM datagen WHERE event_type = 0;

CREATE VIEW auction AS
SELECT
    auction.id,
    auction.itemName,
    auction.description,
    auction.initialBid,
    auction.reserve,
    dateTime,
    auction.expires,
    auction.seller,
    auction.category,
    auction.extra
FROM datagen WHERE event_type = 1;

CREATE VIEW bid AS
SELECT
    bid.auction,
    bid.bidder,
    bid.price,
    bid.channel,
    bid.url,
    dateTime,
    bid.extra
FROM datagen WHERE event_type = 2;

-- q5: hot items. The auctions with the most bids in each 10-second window, every 2 seconds: the
-- bids per auction and window (HOP), joined on the window with the most bids of the window
-- (a GROUP BY over the window results, so an updating input of the join).
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
