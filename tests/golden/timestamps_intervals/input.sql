-- Timestamp arithmetic with intervals, EXTRACT, DATE_FORMAT and temporal literals.
CREATE TABLE clicks (
  id BIGINT,
  ts TIMESTAMP(3)
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '6',
  'seed' = '8',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '1',
  'fields.id.end' = '6',
  'fields.ts.min' = '2024-03-01 00:00:00',
  'fields.ts.max' = '2024-03-31 23:59:59'
);

CREATE TABLE shifted (
  id        BIGINT,
  later     TIMESTAMP(3),
  earlier   TIMESTAMP(3),
  hour_of   BIGINT,
  day_text  STRING,
  is_late   BOOLEAN
) WITH ('connector' = 'print');

INSERT INTO shifted
SELECT
  id,
  ts + INTERVAL '1' HOUR,
  ts - INTERVAL '2' DAY,
  EXTRACT(HOUR FROM ts),
  DATE_FORMAT(ts, 'yyyy-MM-dd'),
  ts > TIMESTAMP '2024-03-15 00:00:00'
FROM clicks;
