-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q18.sql
-- q18: find last bid. Each bidder's last bid on each auction: ROW_NUMBER per (bidder, auction) by
-- time, newest first, kept to the first row (deduplication keeping the last row).
CREATE TABLE discard_sink (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    channel STRING,
    url STRING,
    dateTime TIMESTAMP(3),
    extra STRING
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT auction, bidder, price, channel, url, dateTime, extra
FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY dateTime DESC) AS rank_number
      FROM bid)
WHERE rank_number <= 1;
