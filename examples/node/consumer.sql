-- The team's consumer schema: an inbox keyed by business event id, and a
-- read model updated in the same transaction.
CREATE TABLE inbox (
    consumer_id text  NOT NULL,
    event_id    text  NOT NULL,
    payload     jsonb NOT NULL,
    PRIMARY KEY (consumer_id, event_id)
);
CREATE TABLE projection (
    consumer_id text   NOT NULL,
    currency    text   NOT NULL,
    amount      bigint NOT NULL DEFAULT 0,
    events      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (consumer_id, currency)
);
