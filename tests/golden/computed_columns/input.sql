-- A computed column in the table and arithmetic in the query.
CREATE TABLE items (
  qty        INT,
  unit_price DOUBLE,
  total AS qty * unit_price
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '8',
  'seed' = '2',
  'fields.qty.min' = '1',
  'fields.qty.max' = '20',
  'fields.unit_price.min' = '0',
  'fields.unit_price.max' = '10'
);

CREATE TABLE priced (
  qty        INT,
  total      DOUBLE,
  with_tax   DOUBLE,
  half_qty   INT,
  qty_mod_3  INT
) WITH ('connector' = 'print');

INSERT INTO priced
SELECT qty, total, ROUND(total * 1.2, 2) AS with_tax, qty / 2 AS half_qty, MOD(qty, 3) AS qty_mod_3
FROM items;
