-- The team's producer schema: an outbox the relay drains.
CREATE TABLE outbox (
    id           bigserial PRIMARY KEY,
    event_id     text      NOT NULL UNIQUE,
    payload      jsonb     NOT NULL,
    published_at timestamptz
);
