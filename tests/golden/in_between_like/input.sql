-- IN, BETWEEN and LIKE, negated and not.
CREATE TABLE products (
  code  STRING,
  price INT,
  cat   INT
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '20',
  'seed' = '10',
  'fields.code.length' = '4',
  'fields.price.min' = '1',
  'fields.price.max' = '200',
  'fields.cat.min' = '1',
  'fields.cat.max' = '6'
);

CREATE TABLE picked (code STRING, price INT, cat INT, starts_a BOOLEAN) WITH ('connector' = 'print');

INSERT INTO picked
SELECT code, price, cat, code LIKE 'A%' AS starts_a
FROM products
WHERE cat IN (1, 2, 3)
  AND price BETWEEN 10 AND 150
  AND code NOT LIKE '%z_'
  AND cat NOT IN (2);
