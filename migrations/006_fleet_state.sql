-- Replicas share the fleet memory. Every daemon replica
-- keeps the whole fleet in its own memory and decides from it; in the
-- background it exchanges here (journal.FleetExchange) the verdicts that
-- must be the same on every replica and its own counts. Decisions never
-- wait on these tables.
--
-- fleet_state: one row per bucket that has, or had, a verdict.
--
-- * hold and stop are max registers: a write moves them forward (the later
--   end wins, GREATEST), never back, so replicas that raise them in any
--   order, or a write retried after a lost answer, converge on the same
--   value without coordination. hold_span_ms and stop_why belong to
--   whichever end won. NULL: no hold (or stop) yet.
-- * The breaker moves by compare-and-set on version: a replica writes a
--   transition only WHERE version is the one it saw, and sets it one
--   higher, so exactly one replica makes each transition (opens it, half-
--   opens it, closes it); the others read the winner's.
-- * probe_at / probe_replica are the half-open breaker's probe slot: the
--   one replica that claims the slot for an interval (probe_at at least one
--   interval old) sends the fleet's probe. A transition clears it.
-- * Times are the fleet's clock (the replicas', injectable in tests), never
--   PostgreSQL's; durations are milliseconds. updated_at alone is
--   PostgreSQL's now(), for sweeping idle rows.
-- * seq orders the changes: every write that changes a verdict takes the
--   next value of fleet_seq, so a replica reads only the rows with a seq
--   above the last it saw. The writers take one transaction-level advisory
--   lock before they draw a value, so values become visible in the order
--   they are drawn and a reader never skips a row committed late.
--
-- fleet_replicas: one row per replica with its counts of every bucket over
-- the breaker's window, as sums, not deltas, replaced every second (a missed
-- exchange loses nothing, the next one replaces it). at is the end of the
-- window (the replica's clock); counts is a JSON array, one object a bucket
-- (see fleet_exchange.go for its keys). seq comes from the same sequence.

CREATE SEQUENCE fleet_seq;

CREATE TABLE fleet_state (
    tenant         text        NOT NULL CHECK (char_length(tenant) <= 256),
    scope          text        NOT NULL CHECK (scope IN ('rate_limit', 'availability', 'auth')),
    provider       text        NOT NULL CHECK (char_length(provider) <= 256),
    model          text        NOT NULL CHECK (char_length(model) <= 256),
    key_id         text        NOT NULL CHECK (char_length(key_id) <= 256),
    -- The max registers.
    hold_until     timestamptz,
    hold_span_ms   bigint      NOT NULL DEFAULT 0,
    stop_until     timestamptz,
    stop_why       text        NOT NULL DEFAULT '' CHECK (char_length(stop_why) <= 1024),
    -- The breaker, moved by compare-and-set on version.
    breaker        text        NOT NULL DEFAULT 'closed' CHECK (breaker IN ('closed', 'open', 'half_open')),
    open_until     timestamptz,
    open_period_ms bigint      NOT NULL DEFAULT 0,
    open_why       text        NOT NULL DEFAULT '' CHECK (char_length(open_why) <= 1024),
    version        bigint      NOT NULL DEFAULT 0,
    -- The half-open breaker's probe slot.
    probe_at       timestamptz,
    probe_replica  text,
    seq            bigint      NOT NULL,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (tenant, scope, provider, model, key_id)
);

-- Read: the rows changed since a replica's last read.
CREATE INDEX fleet_state_seq_idx ON fleet_state (seq);

CREATE TABLE fleet_replicas (
    replica text        PRIMARY KEY CHECK (char_length(replica) BETWEEN 1 AND 256),
    at      timestamptz NOT NULL,
    seq     bigint      NOT NULL,
    counts  jsonb       NOT NULL CHECK (jsonb_typeof(counts) = 'array')
);

---- create above / drop below ----

DROP TABLE IF EXISTS fleet_replicas;
DROP TABLE IF EXISTS fleet_state;
DROP SEQUENCE IF EXISTS fleet_seq;
