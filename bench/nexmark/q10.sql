-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q10.sql
-- q10: log to a file system. Every bid to CSV files partitioned by day and minute, as
-- nexmark-flink's q10 writes them (Hive-style folders dt=.../hm=..., committed at checkpoints
-- and at the end). The path is relative to the working directory.
CREATE TABLE fs_sink (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    dateTime TIMESTAMP(3),
    extra STRING,
    dt STRING,
    hm STRING
) PARTITIONED BY (dt, hm) WITH (
    'connector' = 'filesystem',
    'path' = 'bench/out/nexmark-q10',
    'format' = 'csv'
);

INSERT INTO fs_sink
SELECT auction, bidder, price, dateTime, extra, DATE_FORMAT(dateTime, 'yyyy-MM-dd'), DATE_FORMAT(dateTime, 'HH:mm')
FROM bid;
