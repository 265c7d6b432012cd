-- CAST and TRY_CAST between numbers, strings and booleans.
CREATE TABLE raw (
  n INT,
  x DOUBLE,
  s STRING
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '6',
  'seed' = '6',
  'fields.n.min' = '-50',
  'fields.n.max' = '50',
  'fields.x.min' = '0',
  'fields.x.max' = '1000',
  'fields.s.length' = '3'
);

CREATE TABLE converted (
  n_text   STRING,
  x_int    INT,
  n_double DOUBLE,
  n_big    BIGINT,
  s_num    INT,
  positive BOOLEAN,
  x_dec    DECIMAL(10, 2)
) WITH ('connector' = 'print');

INSERT INTO converted
SELECT
  CAST(n AS STRING),
  CAST(x AS INT),
  CAST(n AS DOUBLE),
  CAST(n AS BIGINT),
  TRY_CAST(s AS INT),
  CAST(n > 0 AS BOOLEAN),
  CAST(x AS DECIMAL(10, 2))
FROM raw;
