-- A projection of literals only: no column of the source is read.
CREATE TABLE ticks (
  n INT
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '3',
  'fields.n.min' = '0',
  'fields.n.max' = '9'
);

CREATE TABLE constants (one INT, greeting STRING, half DOUBLE, nothing STRING, yes BOOLEAN) WITH ('connector' = 'print');

INSERT INTO constants
SELECT 1, 'hello', 0.5, CAST(NULL AS STRING), TRUE
FROM ticks;
