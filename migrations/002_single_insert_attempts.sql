-- Recording an attempt becomes a single index-backed INSERT, so that a
-- journaled NextDelay costs little more than a plain one:
--
-- * A context's attempt count and total wait are derived from its attempts
--   (the journal_contexts view) instead of being kept up to date by an UPDATE
--   of the context row in every batch: that UPDATE cost as much as the
--   INSERT it followed.
-- * retry_attempts no longer has a foreign key to retry_contexts. The writer
--   inserts an attempt only when its context exists for the caller's tenant
--   (in the same statement), so the per-row trigger and the row lock it took
--   on the context bought nothing; Prune deletes a context's attempts itself.
-- * ListContexts' failure-type filter probes each listed context's attempts
--   through the primary key (context_id, attempt), so the index on
--   (failure_type, context_id) only cost a third index insert per attempt.

-- * Attempts and error reports carry their context's tenant, so that every
--   journal row says whose it is.
-- * Attempts arrive in time order, so a BRIN index serves the time-ranged
--   queries (prune, per-hour views) at a fraction of a B-tree's insert cost.

ALTER TABLE retry_attempts DROP CONSTRAINT retry_attempts_context_id_fkey;
ALTER TABLE retry_attempts ADD COLUMN tenant text NOT NULL DEFAULT '' CHECK (char_length(tenant) <= 256);
UPDATE retry_attempts a SET tenant = c.tenant FROM retry_contexts c WHERE c.id = a.context_id AND c.tenant <> '';
ALTER TABLE error_reports ADD COLUMN tenant text NOT NULL DEFAULT '' CHECK (char_length(tenant) <= 256);
UPDATE error_reports r SET tenant = c.tenant FROM retry_contexts c WHERE c.id = r.context_id AND c.tenant <> '';
DROP INDEX retry_attempts_failure_type_idx;
DROP INDEX retry_attempts_at_idx;
CREATE INDEX retry_attempts_at_idx ON retry_attempts USING brin (at);

DROP VIEW journal_failed_contexts;
DROP VIEW journal_wait_per_context;

ALTER TABLE retry_contexts DROP COLUMN attempt_count, DROP COLUMN total_wait_ms;
ALTER TABLE retry_contexts SET (fillfactor = 100);

-- Every context with its attempt count (the highest attempt number recorded)
-- and total wait (the sum of the delays decided), read through the primary
-- key of retry_attempts.
CREATE VIEW journal_contexts AS
SELECT c.*,
       coalesce(t.attempt_count, 0)  AS attempt_count,
       coalesce(t.total_wait_ms, 0)  AS total_wait_ms
FROM retry_contexts c
LEFT JOIN LATERAL (SELECT max(a.attempt)           AS attempt_count,
                          sum(a.delay_ms)::bigint  AS total_wait_ms
                   FROM retry_attempts a
                   WHERE a.context_id = c.id) t ON true;

-- How long did each context spend waiting between attempts, out of how long?
CREATE VIEW journal_wait_per_context AS
SELECT c.id AS context_id,
       c.tenant,
       c.agent,
       c.provider,
       c.model,
       c.operation,
       c.outcome,
       c.started_at,
       c.finished_at,
       c.attempt_count,
       c.total_wait_ms,
       (extract(epoch FROM c.finished_at - c.started_at) * 1000)::bigint AS elapsed_ms
FROM journal_contexts c;

-- Which contexts failed, and why?
CREATE VIEW journal_failed_contexts AS
SELECT c.id AS context_id,
       c.tenant,
       c.agent,
       c.provider,
       c.model,
       c.operation,
       c.started_at,
       c.finished_at,
       c.attempt_count,
       c.total_wait_ms,
       r.root_cause_type,
       r.root_cause_rule,
       r.root_cause_message,
       r.recovery_action,
       r.unrecoverable,
       r.manual_action
FROM journal_contexts c
LEFT JOIN error_reports r ON r.context_id = c.id
WHERE c.outcome = 'failed';

---- create above / drop below ----

ALTER TABLE retry_attempts DROP COLUMN tenant;
ALTER TABLE error_reports DROP COLUMN tenant;

DROP VIEW journal_failed_contexts;
DROP VIEW journal_wait_per_context;

ALTER TABLE retry_contexts
    ADD COLUMN attempt_count integer NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    ADD COLUMN total_wait_ms bigint  NOT NULL DEFAULT 0 CHECK (total_wait_ms >= 0);
UPDATE retry_contexts c
SET attempt_count = t.attempt_count, total_wait_ms = t.total_wait_ms
FROM journal_contexts t
WHERE t.id = c.id;
DROP VIEW journal_contexts;
ALTER TABLE retry_contexts SET (fillfactor = 70);

CREATE INDEX retry_attempts_failure_type_idx ON retry_attempts (failure_type, context_id);
DROP INDEX retry_attempts_at_idx;
CREATE INDEX retry_attempts_at_idx ON retry_attempts (at);

-- Attempts whose context is gone could not have a foreign key.
DELETE FROM retry_attempts a WHERE NOT EXISTS (SELECT 1 FROM retry_contexts c WHERE c.id = a.context_id);
ALTER TABLE retry_attempts ADD CONSTRAINT retry_attempts_context_id_fkey
    FOREIGN KEY (context_id) REFERENCES retry_contexts (id) ON DELETE CASCADE;

CREATE VIEW journal_wait_per_context AS
SELECT c.id AS context_id,
       c.tenant,
       c.agent,
       c.provider,
       c.model,
       c.operation,
       c.outcome,
       c.started_at,
       c.finished_at,
       c.attempt_count,
       c.total_wait_ms,
       (extract(epoch FROM c.finished_at - c.started_at) * 1000)::bigint AS elapsed_ms
FROM retry_contexts c;

CREATE VIEW journal_failed_contexts AS
SELECT c.id AS context_id,
       c.tenant,
       c.agent,
       c.provider,
       c.model,
       c.operation,
       c.started_at,
       c.finished_at,
       c.attempt_count,
       c.total_wait_ms,
       r.root_cause_type,
       r.root_cause_rule,
       r.root_cause_message,
       r.recovery_action,
       r.unrecoverable,
       r.manual_action
FROM retry_contexts c
LEFT JOIN error_reports r ON r.context_id = c.id
WHERE c.outcome = 'failed';
