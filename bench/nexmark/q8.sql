-- run: clink run -i bench/nexmark/ddl.sql bench/nexmark/q8.sql
-- q8: monitor new users. People who created an auction in the same 10-second window as they
-- registered: two TUMBLE aggregates joined on the person, window start and window end.
CREATE TABLE discard_sink (
    id BIGINT,
    name STRING,
    stime TIMESTAMP(3)
) WITH ('connector' = 'blackhole');

INSERT INTO discard_sink
SELECT P.id, P.name, P.starttime
FROM (
    SELECT id, name,
           window_start AS starttime,
           window_end AS endtime
    FROM TABLE(
        TUMBLE(TABLE person, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
    GROUP BY id, name, window_start, window_end
) P
JOIN (
    SELECT seller,
           window_start AS starttime,
           window_end AS endtime
    FROM TABLE(
        TUMBLE(TABLE auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
    GROUP BY seller, window_start, window_end
) A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime;
