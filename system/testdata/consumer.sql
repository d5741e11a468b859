CREATE TABLE inbox (consumer_id text, event_id text, payload jsonb, PRIMARY KEY (consumer_id, event_id));
