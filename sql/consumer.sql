-- Consumer database: the inbox (dedupe by business event id per consumer id)
-- and the projection it guards. Both change in ONE transaction, or neither does.

CREATE TABLE inbox (
    consumer_id text        NOT NULL, -- logical projection, never a worker id
    event_id    text        NOT NULL, -- business event id, never a broker entry id
    payload     jsonb       NOT NULL, -- the original payload: a later delivery is compared to it
    received_at timestamptz NOT NULL DEFAULT now(),
    -- the consumer's apply order (what out_of_order reads): numbered as each
    -- row is inserted, where received_at (now(): the transaction's start) ties
    -- rows of one transaction and orders overlapping ones by their start
    applied_seq bigserial   NOT NULL,
    PRIMARY KEY (consumer_id, event_id)
);

-- A read model: transferred atomic units and event counts per (consumer, currency).
-- Currencies are never added together.
CREATE TABLE projection (
    consumer_id text   NOT NULL,
    currency    text   NOT NULL,
    amount      bigint NOT NULL DEFAULT 0,
    events      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (consumer_id, currency)
);

-- Strict ordering: the last version applied per (consumer, aggregate), and the
-- events held back because their predecessor has not been applied yet.
CREATE TABLE aggregate_versions (
    consumer_id text   NOT NULL,
    aggregate   text   NOT NULL,
    version     bigint NOT NULL,
    PRIMARY KEY (consumer_id, aggregate)
);

CREATE TABLE held (
    consumer_id text   NOT NULL,
    event_id    text   NOT NULL,
    aggregate   text   NOT NULL,
    version     bigint NOT NULL,
    PRIMARY KEY (consumer_id, event_id)
);
