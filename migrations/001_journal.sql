-- The RetryContext journal: one row per operation that may be retried, one
-- row per failed attempt, one error report per failed context. Every column
-- is bounded so that no row can grow without limit; the writer (package
-- internal/journal) validates or truncates before the CHECKs ever fire.

CREATE TABLE retry_contexts (
    id            uuid        PRIMARY KEY,
    tenant        text        NOT NULL DEFAULT '' CHECK (char_length(tenant) <= 256),
    agent         text        NOT NULL DEFAULT '' CHECK (char_length(agent) <= 256),
    provider      text        NOT NULL DEFAULT '' CHECK (char_length(provider) <= 256),
    model         text        NOT NULL DEFAULT '' CHECK (char_length(model) <= 256),
    operation     text        NOT NULL DEFAULT '' CHECK (char_length(operation) <= 256),
    profile       text        NOT NULL DEFAULT '' CHECK (char_length(profile) <= 256),
    labels        jsonb       NOT NULL DEFAULT '{}'
                              CHECK (jsonb_typeof(labels) = 'object' AND pg_column_size(labels) <= 8192),
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    outcome       text        NOT NULL DEFAULT 'in_progress'
                              CHECK (outcome IN ('in_progress', 'resolved', 'failed', 'abandoned')),
    attempt_count integer     NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    total_wait_ms bigint      NOT NULL DEFAULT 0 CHECK (total_wait_ms >= 0),
    CHECK ((outcome = 'in_progress') = (finished_at IS NULL))
)
-- Every batch of attempts updates its contexts' attempt_count and
-- total_wait_ms; room left on each page lets those updates stay on the page
-- (HOT: no new index entries), which made them several times cheaper.
WITH (fillfactor = 70);

-- A tenant's contexts, newest first (ListContexts without filters).
CREATE INDEX retry_contexts_tenant_started_idx ON retry_contexts (tenant, started_at DESC, id DESC);
-- ListContexts filtered by outcome or provider, within a time range.
CREATE INDEX retry_contexts_tenant_outcome_started_idx ON retry_contexts (tenant, outcome, started_at DESC, id DESC);
CREATE INDEX retry_contexts_tenant_provider_started_idx ON retry_contexts (tenant, provider, started_at DESC, id DESC);
-- Prune (finished contexts started before a cut-off) and time-ranged views.
CREATE INDEX retry_contexts_started_idx ON retry_contexts (started_at);

CREATE TABLE retry_attempts (
    context_id      uuid        NOT NULL REFERENCES retry_contexts (id) ON DELETE CASCADE,
    attempt         integer     NOT NULL CHECK (attempt BETWEEN 1 AND 1000),
    at              timestamptz NOT NULL,
    duration_ms     bigint      NOT NULL DEFAULT 0 CHECK (duration_ms >= 0),
    failure_type    text        NOT NULL DEFAULT '' CHECK (char_length(failure_type) <= 256),
    retryable       boolean     NOT NULL DEFAULT false,
    rule            text        NOT NULL DEFAULT '' CHECK (char_length(rule) <= 256),
    http_status     integer     NOT NULL DEFAULT 0 CHECK (http_status = 0 OR http_status BETWEEN 100 AND 999),
    error_code      text        NOT NULL DEFAULT '' CHECK (char_length(error_code) <= 256),
    message         text        NOT NULL DEFAULT '' CHECK (char_length(message) <= 1024),
    recovery_action text        NOT NULL DEFAULT '' CHECK (char_length(recovery_action) <= 1024),
    -- NULL when the caller recorded no decision for this attempt.
    decision        text        CHECK (decision IN ('retry', 'stop', 'fall_back')),
    delay_ms        bigint      NOT NULL DEFAULT 0 CHECK (delay_ms >= 0),
    strategy        text        NOT NULL DEFAULT '' CHECK (char_length(strategy) <= 1024),
    stop_reason     text        NOT NULL DEFAULT '' CHECK (char_length(stop_reason) <= 1024),
    fallback        text        NOT NULL DEFAULT '' CHECK (char_length(fallback) <= 256),
    provider        text        NOT NULL DEFAULT '' CHECK (char_length(provider) <= 256),
    model           text        NOT NULL DEFAULT '' CHECK (char_length(model) <= 256),
    PRIMARY KEY (context_id, attempt)
);

-- Failures per hour and per type (the views), and ListContexts by failure type.
CREATE INDEX retry_attempts_at_idx ON retry_attempts (at);
CREATE INDEX retry_attempts_failure_type_idx ON retry_attempts (failure_type, context_id);

CREATE TABLE error_reports (
    context_id         uuid        PRIMARY KEY REFERENCES retry_contexts (id) ON DELETE CASCADE,
    created_at         timestamptz NOT NULL DEFAULT now(),
    root_cause_type    text        NOT NULL DEFAULT '' CHECK (char_length(root_cause_type) <= 256),
    root_cause_rule    text        NOT NULL DEFAULT '' CHECK (char_length(root_cause_rule) <= 256),
    root_cause_message text        NOT NULL DEFAULT '' CHECK (char_length(root_cause_message) <= 1024),
    recovery_action    text        NOT NULL DEFAULT '' CHECK (char_length(recovery_action) <= 1024),
    unrecoverable      boolean     NOT NULL DEFAULT false,
    manual_action      text        NOT NULL DEFAULT '' CHECK (char_length(manual_action) <= 1024),
    -- The attempts the report covers are 1..last_attempt (a late record does
    -- not change a written report).
    last_attempt       integer     NOT NULL DEFAULT 0 CHECK (last_attempt >= 0),
    text               text        NOT NULL DEFAULT '' CHECK (char_length(text) <= 65536)
);

-- Post-mortem views. Hours are UTC whatever the session's TimeZone; provider
-- and model are the ones the attempt used (they change on fallback), else the
-- context's.

-- How many failures, per provider, model and failure type, per hour?
CREATE VIEW journal_failures_per_hour AS
SELECT c.tenant,
       date_trunc('hour', a.at, 'UTC')          AS hour,
       coalesce(nullif(a.provider, ''), c.provider) AS provider,
       coalesce(nullif(a.model, ''), c.model)       AS model,
       a.failure_type,
       count(*)                                 AS failures
FROM retry_attempts a
JOIN retry_contexts c ON c.id = a.context_id
GROUP BY 1, 2, 3, 4, 5;

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
FROM retry_contexts c;

-- How long did we wait because of each provider?
CREATE VIEW journal_wait_per_provider AS
SELECT c.tenant,
       coalesce(nullif(a.provider, ''), c.provider)    AS provider,
       count(DISTINCT a.context_id)                    AS contexts,
       count(*)                                        AS attempts,
       count(*) FILTER (WHERE a.decision = 'retry')    AS retries,
       sum(a.delay_ms)::bigint                         AS total_wait_ms,
       max(a.delay_ms)                                 AS max_wait_ms
FROM retry_attempts a
JOIN retry_contexts c ON c.id = a.context_id
GROUP BY 1, 2;

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
FROM retry_contexts c
LEFT JOIN error_reports r ON r.context_id = c.id
WHERE c.outcome = 'failed';

-- When a failure type showed up in a context, how often did the context
-- still succeed? Among finished contexts with at least one attempt of that
-- type, the share that resolved.
CREATE VIEW journal_retry_success_rate AS
SELECT c.tenant,
       t.failure_type,
       count(*)                                          AS contexts,
       count(*) FILTER (WHERE c.outcome = 'resolved')    AS resolved,
       round(count(*) FILTER (WHERE c.outcome = 'resolved')::numeric / count(*), 4) AS success_rate
FROM (SELECT DISTINCT context_id, failure_type FROM retry_attempts) t
JOIN retry_contexts c ON c.id = t.context_id
WHERE c.outcome <> 'in_progress'
GROUP BY 1, 2;

---- create above / drop below ----

DROP VIEW IF EXISTS journal_retry_success_rate;
DROP VIEW IF EXISTS journal_failed_contexts;
DROP VIEW IF EXISTS journal_wait_per_provider;
DROP VIEW IF EXISTS journal_wait_per_context;
DROP VIEW IF EXISTS journal_failures_per_hour;
DROP TABLE IF EXISTS error_reports;
DROP TABLE IF EXISTS retry_attempts;
DROP TABLE IF EXISTS retry_contexts;
