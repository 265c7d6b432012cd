-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q12.sql
-- q12: processing-time windows. Bids per bidder in 10-second windows of processing time (the
-- wall clock when clink handles each bid): the result depends on how fast the events are read,
-- so it is run and reported but not compared with an oracle.
CREATE TABLE discard_sink (
    bidder BIGINT,
    bid_count BIGINT,
    starttime TIMESTAMP(3),
    endtime TIMESTAMP(3)
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT
    B.bidder,
    COUNT(*) AS bid_count,
    TUMBLE_START(B.p_time, INTERVAL '10' SECOND) AS starttime,
    TUMBLE_END(B.p_time, INTERVAL '10' SECOND) AS endtime
FROM (SELECT *, PROCTIME() AS p_time FROM bid) B
GROUP BY B.bidder, TUMBLE(B.p_time, INTERVAL '10' SECOND);
