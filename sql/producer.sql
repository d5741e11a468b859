-- Producer database: the business facts and the outbox that announces them.
-- A transfer writes journal + ledger entries + balances + outbox in ONE transaction.

CREATE TABLE accounts (
    account  text   NOT NULL,
    currency text   NOT NULL,
    balance  bigint NOT NULL DEFAULT 0, -- atomic units; created on first use with 0
    PRIMARY KEY (account, currency)
);

CREATE TABLE journal (
    id           bigserial   PRIMARY KEY,
    event_id     text        NOT NULL UNIQUE, -- business event id: one transfer, one event
    from_account text        NOT NULL,
    to_account   text        NOT NULL,
    amount       bigint      NOT NULL CHECK (amount > 0),
    currency     text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Two rows per transfer: a debit of the sender and a credit of the receiver.
CREATE TABLE ledger_entries (
    id         bigserial PRIMARY KEY,
    journal_id bigint    NOT NULL REFERENCES journal (id),
    account    text      NOT NULL,
    currency   text      NOT NULL,
    direction  text      NOT NULL CHECK (direction IN ('debit', 'credit')),
    amount     bigint    NOT NULL CHECK (amount > 0)
);

-- Per-aggregate versions: produce with an aggregate takes the next one in
-- its own transaction, so events of one aggregate carry a gapless sequence.
CREATE TABLE aggregates (
    aggregate text   PRIMARY KEY,
    version   bigint NOT NULL
);

CREATE TABLE outbox (
    id           bigserial   PRIMARY KEY, -- relay order
    event_id     text        NOT NULL UNIQUE,
    payload      jsonb       NOT NULL,
    published    boolean     NOT NULL DEFAULT false,
    published_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- The relay only ever scans unpublished rows; a partial index keeps that scan
-- proportional to the backlog, not to the history.
CREATE INDEX outbox_unpublished ON outbox (id) WHERE NOT published;

-- Every published row becomes a dead index entry and, once rows are archived or
-- deleted, a dead tuple; the relay's scan must not slow down with the history.
-- Vacuum the outbox after a fixed number of changes, not a fraction of its size,
-- and without the cost delay (a throwaway test server; production tunes this).
ALTER TABLE outbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- The CDC relay (relay: {mode: cdc}) reads committed outbox inserts from a
-- logical replication slot through this publication (pgoutput). Inserts
-- only: the polling relay's marks and the runner's resets are not events.
CREATE PUBLICATION outbox_cdc FOR TABLE outbox WITH (publish = 'insert');
