-- Keep the expensive orders and project two of their columns.
CREATE TABLE orders (
  id     BIGINT NOT NULL,
  price  DOUBLE,
  region STRING
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '10',
  'seed' = '1',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '1',
  'fields.id.end' = '10',
  'fields.price.min' = '1',
  'fields.price.max' = '100',
  'fields.region.length' = '2'
);

CREATE TABLE expensive (
  id    BIGINT NOT NULL,
  price DOUBLE
) WITH ('connector' = 'print');

INSERT INTO expensive
SELECT id, price
FROM orders
WHERE price > 50;
