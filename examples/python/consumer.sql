-- The Python team's consumer schema: inbox_events is the inbox,
-- ledger_totals the read model.
CREATE TABLE inbox_events (
    group_name text  NOT NULL,
    event_key  text  NOT NULL,
    data       jsonb NOT NULL,
    PRIMARY KEY (group_name, event_key)
);
CREATE TABLE ledger_totals (
    group_name text   NOT NULL,
    currency   text   NOT NULL,
    amount     bigint NOT NULL DEFAULT 0,
    n          bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (group_name, currency)
);
-- A currency is three letters (ISO 4217): an event with another is poison
-- for this consumer, refused by the database on every delivery.
ALTER TABLE ledger_totals ADD CONSTRAINT currency_code CHECK (char_length(currency) = 3);
