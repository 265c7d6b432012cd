-- Flink's pattern recognition example: periods of falling prices per symbol.
CREATE TABLE Ticker (
    symbol STRING,
    rowtime TIMESTAMP(3),
    price BIGINT,
    tax BIGINT,
    WATERMARK FOR rowtime AS rowtime - INTERVAL '1' SECOND
) WITH ('connector' = 'datagen', 'number-of-rows' = '50', 'seed' = '7', 'fields.symbol.length' = '1',
        'fields.price.min' = '1', 'fields.price.max' = '30', 'fields.tax.min' = '1', 'fields.tax.max' = '3');

CREATE TABLE drops (symbol STRING, start_tstamp TIMESTAMP(3), bottom_tstamp TIMESTAMP(3),
                    end_tstamp TIMESTAMP(3), total BIGINT) WITH ('connector' = 'blackhole');

INSERT INTO drops
SELECT * FROM Ticker MATCH_RECOGNIZE (
    PARTITION BY symbol
    ORDER BY rowtime
    MEASURES
        START_ROW.rowtime AS start_tstamp,
        LAST(PRICE_DOWN.rowtime) AS bottom_tstamp,
        LAST(PRICE_UP.rowtime) AS end_tstamp,
        SUM(price * tax) AS total
    AFTER MATCH SKIP TO LAST PRICE_UP
    PATTERN (START_ROW PRICE_DOWN+ PRICE_UP)
    WITHIN INTERVAL '1' MINUTE
    DEFINE
        PRICE_DOWN AS
            (LAST(PRICE_DOWN.price, 1) IS NULL AND PRICE_DOWN.price < START_ROW.price) OR
                PRICE_DOWN.price < LAST(PRICE_DOWN.price, 1),
        PRICE_UP AS PRICE_UP.price > LAST(PRICE_DOWN.price, 1)
) MR;
