-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q3.sql
-- q3: local item suggestion. Sellers in three states who put up an auction in category 10: an
-- inner join of auction and person on the seller, both append-only, so the result is too. A
-- regular join keeps both sides, so its state grows with the stream.
CREATE TABLE discard_sink (
    name STRING,
    city STRING,
    state STRING,
    id BIGINT
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    P.name, P.city, P.state, A.id
FROM
    auction AS A INNER JOIN person AS P ON A.seller = P.id
WHERE
    A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA');
