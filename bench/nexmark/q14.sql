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

-- q14: calculation. Classifies each bid's time of day and counts a character in its extra
-- field with a Python function (nexmark_udfs.py next to this file; bench/nexmark.py puts this
-- folder on the Python path, by hand: PYTHONPATH=bench/nexmark clink run bench/nexmark/q14.sql).
-- nexmark-flink declares the price DECIMAL(23, 3); it is DOUBLE here, as in q1.
CREATE FUNCTION count_char AS 'nexmark_udfs.count_char' LANGUAGE PYTHON;

CREATE TABLE discard_sink (
    auction BIGINT,
    bidder BIGINT,
    price DOUBLE,
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
