-- A subquery in FROM, with its own filter and computed column.
CREATE TABLE events (
  id    BIGINT,
  score INT
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '10',
  'seed' = '4',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '100',
  'fields.id.end' = '109',
  'fields.score.min' = '0',
  'fields.score.max' = '100'
);

CREATE TABLE high (id BIGINT, doubled INT) WITH ('connector' = 'print');

INSERT INTO high
SELECT s.id, s.doubled
FROM (
  SELECT id, score * 2 AS doubled FROM events WHERE score >= 10
) AS s
WHERE s.doubled < 150;
