CREATE TABLE outbox (event_id text PRIMARY KEY, payload jsonb, published_at timestamptz);
