-- EXPLAIN prints a plan; only the INSERT runs.
CREATE TABLE src (
  id BIGINT,
  v  INT
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '4',
  'fields.v.min' = '0',
  'fields.v.max' = '9'
);

CREATE TABLE dst (id BIGINT, v INT) WITH ('connector' = 'blackhole');

EXPLAIN SELECT id, v + 1 AS w FROM src WHERE v > 3;

INSERT INTO dst SELECT id, v FROM src;
