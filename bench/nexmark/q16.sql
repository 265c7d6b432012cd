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

-- q16: channel statistics report. As q15, per channel and day, with the minute of the day's
-- latest bid (MAX over a string).
CREATE TABLE discard_sink (
    channel VARCHAR,
    `day` VARCHAR,
    `minute` VARCHAR,
    total_bids BIGINT,
    rank1_bids BIGINT,
    rank2_bids BIGINT,
    rank3_bids BIGINT,
    total_bidders BIGINT,
    rank1_bidders BIGINT,
    rank2_bidders BIGINT,
    rank3_bidders BIGINT,
    total_auctions BIGINT,
    rank1_auctions BIGINT,
    rank2_auctions BIGINT,
    rank3_auctions BIGINT
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    channel,
    DATE_FORMAT(dateTime, 'yyyy-MM-dd') AS `day`,
    MAX(DATE_FORMAT(dateTime, 'HH:mm')) AS `minute`,
    COUNT(*) AS total_bids,
    COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
    COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
    COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
    COUNT(DISTINCT bidder) AS total_bidders,
    COUNT(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
    COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
    COUNT(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
    COUNT(DISTINCT auction) AS total_auctions,
    COUNT(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
    COUNT(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
    COUNT(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
FROM bid
GROUP BY channel, DATE_FORMAT(dateTime, 'yyyy-MM-dd');
