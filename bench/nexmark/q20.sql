-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q20.sql
-- q20: expand bid with auction. Every bid of a category-10 auction, with the auction's columns:
-- an inner join of bid and auction on the auction id (filtered on the auction side first).
CREATE TABLE discard_sink (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    channel STRING,
    url STRING,
    bid_dateTime TIMESTAMP(3),
    bid_extra STRING,

    itemName STRING,
    description STRING,
    initialBid BIGINT,
    reserve BIGINT,
    auction_dateTime TIMESTAMP(3),
    expires TIMESTAMP(3),
    seller BIGINT,
    category BIGINT,
    auction_extra STRING
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    auction, bidder, price, channel, url, B.dateTime, B.extra,
    itemName, description, initialBid, reserve, A.dateTime, expires, seller, category, A.extra
FROM
    bid AS B INNER JOIN auction AS A ON B.auction = A.id
WHERE A.category = 10;
