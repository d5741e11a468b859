-- The payments team's consumer schema: processed_messages is the inbox
-- (one row per subscriber and message id), account_balances the read model.
-- applied_seq numbers the rows as they are inserted: the consumer's apply
-- order (inbox.applied_order), which processed_at (now(), the start of
-- the transaction) would tie for rows written in one transaction.
CREATE TABLE processed_messages (
    subscriber   text        NOT NULL,
    message_id   text        NOT NULL,
    body         jsonb       NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    applied_seq  bigserial   NOT NULL,
    PRIMARY KEY (subscriber, message_id)
);
CREATE TABLE account_balances (
    subscriber  text   NOT NULL,
    currency    text   NOT NULL,
    total_minor bigint NOT NULL DEFAULT 0,
    event_count bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (subscriber, currency)
);
