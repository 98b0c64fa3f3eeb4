-- Fleet memory: the daemon keeps per-bucket state shared by every client of
-- a tenant (a cooldown "hold" after a rate limit, a circuit breaker, a retry
-- budget, a fleet-wide stop on a revoked key), and journals every
-- transition of that state here, so that a post-mortem can say when a
-- bucket's breaker opened, whose failure opened it and how many retries the
-- fleet spared the provider.
--
-- * A bucket is what the state is kept for, e.g.
--   "rate_limit:openai/gpt-4o@key-a": it joins up to three names of 256
--   characters, so it may be longer than the other names.
-- * key_id names an API key (a hash or label the daemon derives), never the
--   key itself.
-- * counts holds the numbers behind the transition, e.g.
--   {"failures": 31, "clients": 6, "hold_ms": 10000, "open_ms": 5000}.
-- * Events are few (transitions, not calls), so plain B-tree indexes serve
--   both a bucket's history and Prune (which deletes by at).

CREATE TABLE fleet_events (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL,
    tenant    text        NOT NULL DEFAULT '' CHECK (char_length(tenant) <= 256),
    bucket    text        NOT NULL CHECK (char_length(bucket) BETWEEN 1 AND 1024),
    scope     text        NOT NULL CHECK (scope IN ('rate_limit', 'availability', 'auth')),
    provider  text        NOT NULL DEFAULT '' CHECK (char_length(provider) <= 256),
    model     text        NOT NULL DEFAULT '' CHECK (char_length(model) <= 256),
    key_id    text        NOT NULL DEFAULT '' CHECK (char_length(key_id) <= 256),
    event     text        NOT NULL CHECK (event IN ('hold_set', 'breaker_open', 'breaker_half_open',
                                                    'breaker_close', 'budget_exhausted', 'fleet_stop')),
    reason    text        NOT NULL DEFAULT '' CHECK (char_length(reason) <= 1024),
    -- The client whose failure caused the transition, and the replica that
    -- journaled it.
    client_id text        NOT NULL DEFAULT '' CHECK (char_length(client_id) <= 256),
    replica   text        NOT NULL DEFAULT '' CHECK (char_length(replica) <= 256),
    counts    jsonb       NOT NULL DEFAULT '{}'
                          CHECK (jsonb_typeof(counts) = 'object' AND pg_column_size(counts) <= 4096)
);

-- A bucket's history (ListFleetEvents, the views' per-bucket lookups).
CREATE INDEX fleet_events_tenant_bucket_at_idx ON fleet_events (tenant, bucket, at);
-- Prune.
CREATE INDEX fleet_events_at_idx ON fleet_events (at);

-- Post-mortem views. Events of one bucket are ordered by (at, id): at is
-- when the transition happened, id breaks ties between events journaled
-- with the same time.

-- When was each bucket's breaker open, and for how long? One row per
-- breaker_open event, closed by the first breaker_close of the same tenant
-- and bucket after it (a breaker that half-opens and opens again before it
-- closes gives several rows ending at the same close). closed_at and
-- open_seconds are NULL while the breaker is still open.
CREATE VIEW journal_fleet_breaker_periods AS
SELECT o.tenant,
       o.bucket,
       o.provider,
       o.model,
       o.at                                 AS opened_at,
       c.at                                 AS closed_at,
       extract(epoch FROM c.at - o.at)      AS open_seconds,
       o.reason,
       o.client_id,
       o.counts
FROM fleet_events o
LEFT JOIN LATERAL (SELECT e.at
                   FROM fleet_events e
                   WHERE e.tenant = o.tenant AND e.bucket = o.bucket AND e.event = 'breaker_close'
                     AND (e.at, e.id) > (o.at, o.id)
                   ORDER BY e.at, e.id
                   LIMIT 1) c ON true
WHERE o.event = 'breaker_open';

-- How many attempts did the fleet spare the provider? Per tenant, provider,
-- model and fleet stop reason, the journaled attempts whose decision was a
-- stop or a fallback because of fleet state: stop_reason as the server
-- stores it (the policyd.v1.StopReason name without "STOP_REASON_").
-- The provider and model are the ones the attempt used, else the context's.
CREATE VIEW journal_fleet_saved_attempts AS
SELECT a.tenant,
       coalesce(nullif(a.provider, ''), c.provider, '')    AS provider,
       coalesce(nullif(a.model, ''), c.model, '')          AS model,
       a.stop_reason,
       count(*)                                            AS attempts,
       count(*) FILTER (WHERE a.decision = 'stop')         AS stops,
       count(*) FILTER (WHERE a.decision = 'fall_back')    AS fallbacks,
       count(DISTINCT a.context_id)                        AS contexts,
       min(a.at)                                           AS first_seen,
       max(a.at)                                           AS last_seen
FROM retry_attempts a
LEFT JOIN retry_contexts c ON c.id = a.context_id
WHERE a.decision IN ('stop', 'fall_back')
  AND a.stop_reason IN ('CIRCUIT_OPEN', 'RETRY_BUDGET_EXHAUSTED', 'FLEET_STOP')
GROUP BY 1, 2, 3, 4;

-- Which client saw the first failure of each incident? A bucket's events
-- fall into incidents separated by at least 60 seconds without any event on
-- the bucket; each incident's row is its first hold_set, breaker_open or
-- fleet_stop (an incident that journaled none of those, e.g. a late close,
-- has no row). incident_started_at is the incident's first event of any
-- kind.
CREATE VIEW journal_fleet_first_failures AS
WITH marked AS (
    SELECT e.*,
           CASE WHEN e.at - lag(e.at) OVER w < interval '60 seconds' THEN 0 ELSE 1 END AS starts
    FROM fleet_events e
    WINDOW w AS (PARTITION BY e.tenant, e.bucket ORDER BY e.at, e.id)
), incidents AS (
    SELECT m.*, sum(m.starts) OVER (PARTITION BY m.tenant, m.bucket ORDER BY m.at, m.id) AS incident
    FROM marked m
)
SELECT DISTINCT ON (i.tenant, i.bucket, i.incident)
       i.tenant,
       i.bucket,
       i.scope,
       i.provider,
       i.model,
       i.key_id,
       i.event,
       i.at,
       i.client_id,
       i.replica,
       i.reason,
       i.incident_started_at
FROM (SELECT n.*, min(n.at) OVER (PARTITION BY n.tenant, n.bucket, n.incident) AS incident_started_at
      FROM incidents n) i
WHERE i.event IN ('hold_set', 'breaker_open', 'fleet_stop')
ORDER BY i.tenant, i.bucket, i.incident, i.at, i.id;

---- create above / drop below ----

DROP VIEW IF EXISTS journal_fleet_first_failures;
DROP VIEW IF EXISTS journal_fleet_saved_attempts;
DROP VIEW IF EXISTS journal_fleet_breaker_periods;
DROP TABLE IF EXISTS fleet_events;
