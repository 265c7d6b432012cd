-- SET statements become the plan's configuration.
SET 'pipeline.name' = 'set-demo';
SET 'parallelism.default' = '1';

CREATE TABLE src (
  v INT
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '3',
  'fields.v.min' = '1',
  'fields.v.max' = '3'
);

CREATE TABLE dst (v INT) WITH ('connector' = 'print');

INSERT INTO dst SELECT v FROM src;
