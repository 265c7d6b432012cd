-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q9.sql
-- q9: winning bids. Each auction's highest bid made while it was open (the earliest of equal
-- ones): a join of auction and bid, then ROW_NUMBER per auction kept to the first row (Top-1).
CREATE TABLE discard_sink (
    id BIGINT,
    itemName STRING,
    description STRING,
    initialBid BIGINT,
    reserve BIGINT,
    dateTime TIMESTAMP(3),
    expires TIMESTAMP(3),
    seller BIGINT,
    category BIGINT,
    extra STRING,
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    bid_dateTime TIMESTAMP(3),
    bid_extra STRING
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    id, itemName, description, initialBid, reserve, dateTime, expires, seller, category, extra,
    auction, bidder, price, bid_dateTime, bid_extra
FROM (
    SELECT A.*, B.auction, B.bidder, B.price, B.dateTime AS bid_dateTime, B.extra AS bid_extra,
        ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.dateTime ASC) AS rownum
    FROM auction A, bid B
    WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
)
WHERE rownum <= 1;
