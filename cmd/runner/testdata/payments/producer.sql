-- A payments team's producer schema: its own names, uuid ids, a jsonb body.
CREATE TABLE payment_outbox (
    id         bigserial   PRIMARY KEY,
    message_id uuid        NOT NULL UNIQUE,
    body       jsonb       NOT NULL,
    sent_at    timestamptz
);
