-- The payments team's producer schema: the outbox its relay drains.
CREATE TABLE payment_outbox (
    id          bigserial   PRIMARY KEY,
    message_id  text        NOT NULL UNIQUE,
    body        jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    sent_at     timestamptz
);
