-- A group-window session aggregation, and hopping windows used as a plain relation.
CREATE TABLE clicks (
  user_id BIGINT,
  ts      TIMESTAMP(3),
  WATERMARK FOR ts AS ts
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '40',
  'seed' = '9',
  'fields.user_id.min' = '1',
  'fields.user_id.max' = '4'
);

SELECT user_id, SESSION_START(ts, INTERVAL '30' MINUTE) AS s, SESSION_END(ts, INTERVAL '30' MINUTE) AS e,
       COUNT(*) AS clicks
FROM clicks
GROUP BY SESSION(ts, INTERVAL '30' MINUTE), user_id;

SELECT user_id, window_start, window_end
FROM TABLE(HOP(TABLE clicks, DESCRIPTOR(ts), INTERVAL '6' HOUR, INTERVAL '12' HOUR))
WHERE user_id = 1;
