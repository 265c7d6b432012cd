-- The string functions, over random strings of a fixed length.
CREATE TABLE words (
  w STRING,
  k INT
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '5',
  'seed' = '7',
  'fields.w.length' = '6',
  'fields.k.min' = '1',
  'fields.k.max' = '3'
);

CREATE TABLE shaped (
  up      STRING,
  low     STRING,
  len     INT,
  head    STRING,
  joined  STRING,
  fn_join STRING,
  swapped STRING,
  trimmed STRING,
  part    STRING
) WITH ('connector' = 'print');

INSERT INTO shaped
SELECT
  UPPER(w),
  LOWER(w),
  CHAR_LENGTH(w),
  SUBSTRING(w, 1, 3),
  w || '-' || CAST(k AS STRING),
  CONCAT(w, '/', w),
  REPLACE(w, 'a', 'A'),
  TRIM('  ' || w || '  '),
  SPLIT_INDEX('a,b,c', ',', 1)
FROM words;
