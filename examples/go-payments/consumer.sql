-- The payments team's consumer schema: processed_messages is the inbox
-- (one row per subscriber and message id), account_balances the read model.
CREATE TABLE processed_messages (
    subscriber   text        NOT NULL,
    message_id   text        NOT NULL,
    body         jsonb       NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subscriber, message_id)
);
CREATE TABLE account_balances (
    subscriber  text   NOT NULL,
    currency    text   NOT NULL,
    total_minor bigint NOT NULL DEFAULT 0,
    event_count bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (subscriber, currency)
);
