-- A bare SELECT: its rows go back to the caller.
CREATE TABLE nums (
  n INT
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '5',
  'fields.n.kind' = 'sequence',
  'fields.n.start' = '1',
  'fields.n.end' = '5'
);

SELECT n, n * n AS square, n % 2 = 0 AS even FROM nums;
