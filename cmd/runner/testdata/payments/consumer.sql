-- The payments team's consumer schema: processed messages per handler and
-- the balances they add up to.
CREATE TABLE processed_messages (
    handler    text  NOT NULL,
    message_id uuid  NOT NULL,
    body       jsonb NOT NULL,
    PRIMARY KEY (handler, message_id)
);
CREATE TABLE balances (
    handler      text   NOT NULL,
    currency     text   NOT NULL,
    amount_minor bigint NOT NULL DEFAULT 0,
    n            bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (handler, currency)
);
