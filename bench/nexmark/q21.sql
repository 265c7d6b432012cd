-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q21.sql
-- q21: add a channel id. Known channels get a fixed id, the others the channel_id parameter of
-- their URL; bids with neither are dropped.
CREATE TABLE discard_sink (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    channel STRING,
    channel_id STRING
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    auction, bidder, price, channel,
    CASE
        WHEN LOWER(channel) = 'apple' THEN '0'
        WHEN LOWER(channel) = 'google' THEN '1'
        WHEN LOWER(channel) = 'facebook' THEN '2'
        WHEN LOWER(channel) = 'baidu' THEN '3'
        ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)
    END AS channel_id
FROM bid
WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL
   OR LOWER(channel) IN ('apple', 'google', 'facebook', 'baidu');
