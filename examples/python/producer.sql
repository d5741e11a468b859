-- The Python team's producer schema.
CREATE TABLE events_outbox (
    seq       bigserial PRIMARY KEY,
    event_key text      NOT NULL UNIQUE,
    data      jsonb     NOT NULL,
    published boolean   NOT NULL DEFAULT false
);
