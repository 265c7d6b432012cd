-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q22.sql
-- q22: get URL directories. The first three directories of each bid's URL (SPLIT_INDEX counts
-- from 0: index 3 is the first directory after "https://host").
CREATE TABLE discard_sink (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    channel STRING,
    dir1 STRING,
    dir2 STRING,
    dir3 STRING
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    auction, bidder, price, channel,
    SPLIT_INDEX(url, '/', 3) AS dir1,
    SPLIT_INDEX(url, '/', 4) AS dir2,
    SPLIT_INDEX(url, '/', 5) AS dir3
FROM bid;
