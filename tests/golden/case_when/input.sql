-- Searched and simple CASE, with and without ELSE.
CREATE TABLE scores (
  id    INT,
  score INT,
  grade INT
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '10',
  'seed' = '5',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '1',
  'fields.id.end' = '10',
  'fields.score.min' = '0',
  'fields.score.max' = '100',
  'fields.grade.min' = '1',
  'fields.grade.max' = '4',
  'fields.grade.null-rate' = '0.2'
);

CREATE TABLE labelled (id INT, band STRING, grade_name STRING) WITH ('connector' = 'print');

INSERT INTO labelled
SELECT
  id,
  CASE WHEN score >= 90 THEN 'high' WHEN score >= 50 THEN 'mid' ELSE 'low' END AS band,
  CASE grade WHEN 1 THEN 'one' WHEN 2 THEN 'two' END AS grade_name
FROM scores;
