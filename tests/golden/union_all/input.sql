-- UNION ALL of two tables, with a cast to the common type, into one sink.
CREATE TABLE a (k BIGINT, v INT) WITH ('connector' = 'datagen', 'number-of-rows' = '4',
  'fields.k.kind' = 'sequence', 'fields.k.start' = '1', 'fields.k.end' = '4',
  'fields.v.min' = '0', 'fields.v.max' = '9');
CREATE TABLE b (k BIGINT, v BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '3',
  'fields.k.kind' = 'sequence', 'fields.k.start' = '10', 'fields.k.end' = '12',
  'fields.v.min' = '0', 'fields.v.max' = '9');
CREATE TABLE out_ab (k BIGINT, v BIGINT) WITH ('connector' = 'print');

INSERT INTO out_ab
SELECT k, v FROM a WHERE v > 2
UNION ALL
SELECT k, v * 10 FROM b;
