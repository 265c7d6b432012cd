-- One source feeding two sinks from one file.
CREATE TABLE src (
  id BIGINT,
  v  INT
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '8',
  'seed' = '11',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '1',
  'fields.id.end' = '8',
  'fields.v.min' = '-5',
  'fields.v.max' = '5'
);

CREATE TABLE positives (id BIGINT, v INT) WITH ('connector' = 'print', 'print-identifier' = 'pos');
CREATE TABLE negatives (id BIGINT, v INT) WITH ('connector' = 'print', 'print-identifier' = 'neg');
CREATE TABLE dropped (id BIGINT) WITH ('connector' = 'blackhole');

INSERT INTO positives SELECT id, v FROM src WHERE v > 0;
INSERT INTO negatives SELECT id, v FROM src WHERE v < 0;
INSERT INTO dropped SELECT id FROM src;
