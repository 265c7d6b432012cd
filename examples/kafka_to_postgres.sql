-- Page views from Kafka, counted per page in one-minute event-time windows, upserted into
-- PostgreSQL exactly once. Needs `pip install 'clink[kafka,postgres]'`, a broker on
-- localhost:9092 with the topic `page_views`, and in PostgreSQL's database `clink`:
--
--   CREATE TABLE page_view_counts (window_start timestamp(3), window_end timestamp(3),
--     page text, views bigint, users bigint, last_view timestamp(3),
--     PRIMARY KEY (window_start, window_end, page));
--
-- Run it with a state directory, so a restart resumes from the last checkpoint:
--
--   clink run examples/kafka_to_postgres.sql --state-dir state/kafka_to_postgres
--
-- (docs/connectors.md, "End to end", has the whole walk-through.)

SET 'execution.checkpointing.interval' = '2 s';

CREATE TABLE page_views (
  user_id BIGINT,
  page STRING,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = 'page_views',
  'properties.bootstrap.servers' = 'localhost:9092',
  'format' = 'json',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = 'latest-offset'  -- what the topic holds at start; remove it to keep reading
);

CREATE TABLE page_view_counts (
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  page STRING,
  views BIGINT,
  users BIGINT,
  last_view TIMESTAMP(3),
  PRIMARY KEY (window_start, window_end, page) NOT ENFORCED
) WITH (
  'connector' = 'jdbc',
  'url' = 'jdbc:postgresql://localhost:5432/clink',
  'table-name' = 'page_view_counts',
  'username' = 'clink',
  'password' = 'clink'
);

INSERT INTO page_view_counts
SELECT window_start, window_end, page, COUNT(*) AS views, COUNT(DISTINCT user_id) AS users,
       MAX(ts) AS last_view
FROM TABLE(TUMBLE(TABLE page_views, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, page;
