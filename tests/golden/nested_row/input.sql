-- Fields of a nested ROW column, read with dots.
CREATE TABLE people (
  id      INT,
  address ROW<city STRING, zip INT, geo ROW<lat DOUBLE, lon DOUBLE>>
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '4',
  'seed' = '9',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '1',
  'fields.id.end' = '4'
);

CREATE TABLE flat (id INT, city STRING, zip INT, lat DOUBLE) WITH ('connector' = 'print');

INSERT INTO flat
SELECT id, address.city, address.zip, address.geo.lat
FROM people;
