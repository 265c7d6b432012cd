-- A view over a source, queried by an INSERT with a further filter.
CREATE TABLE readings (
  sensor INT,
  temp   DOUBLE
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '12',
  'seed' = '3',
  'fields.sensor.min' = '1',
  'fields.sensor.max' = '4',
  'fields.temp.min' = '-10',
  'fields.temp.max' = '40'
);

CREATE VIEW warm AS
SELECT sensor, temp, temp * 9 / 5 + 32 AS temp_f
FROM readings
WHERE temp > 0;

CREATE TABLE out_warm (sensor INT, temp_f DOUBLE) WITH ('connector' = 'print');

INSERT INTO out_warm
SELECT sensor, temp_f FROM warm WHERE sensor <> 2;
