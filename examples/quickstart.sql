-- clink quickstart: a bounded stream of generated orders, filtered and converted to euros.
CREATE TABLE orders (
  id     BIGINT NOT NULL,
  price  DOUBLE,
  region STRING,
  ts     TIMESTAMP(3)
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '20',
  'seed' = '42',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '1',
  'fields.id.end' = '20',
  'fields.price.min' = '1',
  'fields.price.max' = '100',
  'fields.region.length' = '2'
);

CREATE TABLE eu_orders (
  id        BIGINT NOT NULL,
  price_eur DOUBLE,
  region    STRING
) WITH ('connector' = 'print');

INSERT INTO eu_orders
SELECT id, ROUND(price * 0.908, 2) AS price_eur, UPPER(region)
FROM orders
WHERE price > 10;
