-- An integer column cast to a DECIMAL whose precision is below the integer type's digits.
CREATE TABLE amounts (
  n INT
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '3',
  'fields.n.min' = '1',
  'fields.n.max' = '9'
);

CREATE TABLE money (amount DECIMAL(10, 2)) WITH ('connector' = 'print');

INSERT INTO money SELECT CAST(n AS DECIMAL(10, 2)) FROM amounts;
