-- A tumbling-window aggregation with HAVING and several aggregates over event time.
CREATE TABLE bid (
  auction   BIGINT,
  price     BIGINT,
  date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '50',
  'seed' = '5',
  'fields.auction.min' = '1',
  'fields.auction.max' = '3',
  'fields.price.min' = '1',
  'fields.price.max' = '100'
);

SELECT auction, window_start, window_end, COUNT(*) AS bids, MAX(price) AS top,
       AVG(price) AS mean, COUNT(*) FILTER (WHERE price > 50) AS big
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '6' HOUR))
GROUP BY window_start, window_end, auction
HAVING COUNT(*) > 1;
