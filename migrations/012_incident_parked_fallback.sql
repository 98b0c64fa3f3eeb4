-- Incidents count the calls the clients' gates parked and those they sent
-- to a fallback, beside those they shed: the shed events (internal/fleet,
-- EventShed) carry counts.parked (first attempts parked at their first
-- check: they waited for the fleet instead of failing; those that gave up
-- waiting are in counts.shed too) and counts.fell_back (of counts.shed, the
-- first attempts sent to the assignment's fallback), each left out when 0.
--
-- incident_spans and incidents gain, at the end of their columns:
--   parked: the sum of the incident's shed events' counts.parked;
--   gate_fell_back: the sum of their counts.fell_back (fell_back stays the
--     retries the journal saw turned into a fallback).
-- Both views are replaced in place (their columns only grow);
-- incident_attempts, which reads incident_spans, is unchanged. The down
-- migration drops the three and creates them again as 011 made them.

CREATE OR REPLACE VIEW incident_spans AS
WITH grouped AS (
    SELECT ie.tenant,
           ie.bucket,
           ie.incident_id,
           min(ie.scope)                                                   AS scope,
           min(ie.provider)                                                AS provider,
           min(ie.model)                                                   AS model,
           min(ie.key_id)                                                  AS key_id,
           min(ie.at)                                                      AS started_at,
           max(ie.at)                                                      AS last_event_at,
           count(*)                                                        AS events,
           count(*) FILTER (WHERE ie.event = 'breaker_open')               AS breaker_opens,
           count(*) FILTER (WHERE ie.event = 'hold_set')                   AS holds,
           count(*) FILTER (WHERE ie.event = 'fleet_stop')                 AS stops,
           count(*) FILTER (WHERE ie.event = 'budget_exhausted')           AS budget_exhausted,
           count(*) FILTER (WHERE ie.event = 'fleet_clear')                AS clears,
           coalesce(sum((ie.counts->>'shed')::bigint) FILTER (WHERE ie.event = 'shed'), 0) AS shed,
           coalesce(sum((ie.counts->>'parked')::bigint) FILTER (WHERE ie.event = 'shed'), 0) AS parked,
           coalesce(sum((ie.counts->>'fell_back')::bigint) FILTER (WHERE ie.event = 'shed'), 0) AS gate_fell_back,
           (array_agg(CASE ie.event WHEN 'breaker_open' THEN 'open' WHEN 'breaker_half_open' THEN 'half_open'
                                    ELSE 'closed' END ORDER BY ie.at DESC, ie.event_id DESC)
                FILTER (WHERE ie.event IN ('breaker_open', 'breaker_half_open', 'breaker_close')
                           OR (ie.event = 'fleet_clear' AND split_part(ie.reason, ':', 1) LIKE '%breaker%')))[1]
                                                                           AS breaker_state,
           max(ie.at) FILTER (WHERE ie.event = 'breaker_close'
                                 OR (ie.event = 'fleet_clear' AND split_part(ie.reason, ':', 1) LIKE '%breaker%'))
                                                                           AS closed_at,
           max(ie.busy_until) FILTER (WHERE ie.event IN ('hold_set', 'fleet_stop')) AS held_until,
           max(ie.at) FILTER (WHERE ie.event IN ('hold_set', 'fleet_stop')) AS held_since,
           max(ie.at) FILTER (WHERE ie.event = 'fleet_clear'
                                AND (split_part(ie.reason, ':', 1) LIKE '%hold%'
                                     OR split_part(ie.reason, ':', 1) LIKE '%stop%')) AS hold_cleared_at,
           (array_agg(ie.event ORDER BY ie.at, ie.event_id))[1]            AS first_event,
           (array_agg(ie.reason ORDER BY ie.at, ie.event_id))[1]           AS first_reason,
           coalesce((array_agg(ie.client_id ORDER BY ie.at, ie.event_id) FILTER (WHERE ie.client_id <> ''))[1], '')
                                                                           AS first_client_id,
           (array_agg(ie.reason ORDER BY ie.at, ie.event_id)
                FILTER (WHERE ie.event IN ('breaker_open', 'fleet_stop')))[1] AS first_failure_reason
    FROM incident_events ie
    GROUP BY ie.tenant, ie.bucket, ie.incident_id
    HAVING count(*) FILTER (WHERE ie.event IN ('hold_set', 'breaker_open', 'fleet_stop', 'budget_exhausted')) > 0
), ended AS (
    SELECT g.*,
           CASE WHEN g.breaker_state IN ('open', 'half_open') THEN NULL
                ELSE coalesce(greatest(g.closed_at,
                                       CASE WHEN g.hold_cleared_at >= g.held_since
                                            THEN least(g.held_until, g.hold_cleared_at)
                                            ELSE g.held_until END),
                              g.last_event_at)
           END AS recovered_at
    FROM grouped g
)
SELECT e.tenant, e.bucket, e.incident_id, e.scope, e.provider, e.model, e.key_id, e.started_at,
       e.last_event_at, e.events, e.breaker_opens, e.holds, e.stops, e.budget_exhausted, e.clears, e.shed,
       e.breaker_state, e.closed_at, e.held_until, e.held_since, e.hold_cleared_at, e.first_event,
       e.first_reason, e.first_client_id, e.first_failure_reason, e.recovered_at,
       (e.recovered_at IS NULL AND e.last_event_at > now() - interval '10 minutes')
           OR coalesce(e.recovered_at > now(), false)                      AS open,
       least(now(), coalesce(e.recovered_at,
                             CASE WHEN e.last_event_at > now() - interval '10 minutes' THEN now()
                                  ELSE e.last_event_at END))               AS until_at,
       e.parked,
       e.gate_fell_back
FROM ended e;

CREATE OR REPLACE VIEW incidents AS
SELECT s.incident_id,
       s.tenant,
       s.bucket,
       s.scope,
       s.provider,
       s.model,
       s.key_id,
       s.started_at,
       s.last_event_at,
       s.recovered_at,
       s.open,
       s.first_event,
       s.first_reason,
       s.first_client_id,
       coalesce(j.first_at, s.started_at)                                  AS first_failure_at,
       coalesce(j.first_type,
                substring(s.first_failure_reason FROM '\(last: ([A-Z_]+)\)'),
                substring(s.first_failure_reason FROM '^([A-Z_]+) on key'),
                '')                                                        AS first_failure_type,
       coalesce(j.first_rule, '')                                          AS first_failure_rule,
       j.first_context_id                                                  AS first_failure_context_id,
       coalesce(j.first_agent, '')                                         AS first_failure_agent,
       extract(epoch FROM s.recovered_at - coalesce(j.first_at, s.started_at)) AS recovery_seconds,
       s.breaker_state,
       s.breaker_opens,
       s.holds,
       s.stops,
       s.budget_exhausted,
       s.clears,
       s.events,
       s.shed,
       coalesce(j.failed_attempts, 0)                                      AS failed_attempts,
       coalesce(j.retries_held, 0)                                         AS retries_held,
       coalesce(j.stopped, 0)                                              AS stopped,
       coalesce(j.fell_back, 0)                                            AS fell_back,
       round(coalesce(j.baseline, 0) / 10.0, 3)                            AS baseline_per_second,
       greatest(0, round(coalesce(j.baseline, 0) / 10.0 * extract(epoch FROM s.until_at - s.started_at))
                   - coalesce(j.failed_after_start, 0))::bigint            AS retries_avoided,
       s.until_at,
       s.parked,
       s.gate_fell_back
FROM incident_spans s
LEFT JOIN (
    SELECT a.tenant,
           a.bucket,
           a.incident_id,
           min(a.at) FILTER (WHERE a.in_scope)                                            AS first_at,
           (array_agg(a.failure_type ORDER BY a.at, a.context_id, a.attempt) FILTER (WHERE a.in_scope))[1] AS first_type,
           (array_agg(a.rule ORDER BY a.at, a.context_id, a.attempt) FILTER (WHERE a.in_scope))[1]         AS first_rule,
           (array_agg(a.context_id ORDER BY a.at, a.context_id, a.attempt) FILTER (WHERE a.in_scope))[1]   AS first_context_id,
           (array_agg(a.agent ORDER BY a.at, a.context_id, a.attempt) FILTER (WHERE a.in_scope))[1]        AS first_agent,
           count(*) FILTER (WHERE a.in_scope)                                             AS failed_attempts,
           count(*) FILTER (WHERE a.in_scope AND a.decision = 'retry' AND a.at >= s.started_at) AS retries_held,
           count(*) FILTER (WHERE a.fleet_stopped AND a.decision = 'stop')                AS stopped,
           count(*) FILTER (WHERE a.fleet_stopped AND a.decision = 'fall_back')           AS fell_back,
           count(*) FILTER (WHERE a.in_scope AND a.at > s.started_at)                     AS failed_after_start,
           count(*) FILTER (WHERE a.in_scope AND a.at >= s.started_at - interval '10 seconds'
                                             AND a.at <= s.started_at)                    AS baseline
    FROM incident_attempts a
    JOIN incident_spans s USING (tenant, bucket, incident_id)
    GROUP BY a.tenant, a.bucket, a.incident_id
) j USING (tenant, bucket, incident_id);

---- create above / drop below ----

-- The views as 011 made them: a view cannot lose columns in place.
DROP VIEW incidents;
DROP VIEW incident_attempts;
DROP VIEW incident_spans;

CREATE VIEW incident_spans AS
WITH grouped AS (
    SELECT ie.tenant,
           ie.bucket,
           ie.incident_id,
           min(ie.scope)                                                   AS scope,
           min(ie.provider)                                                AS provider,
           min(ie.model)                                                   AS model,
           min(ie.key_id)                                                  AS key_id,
           min(ie.at)                                                      AS started_at,
           max(ie.at)                                                      AS last_event_at,
           count(*)                                                        AS events,
           count(*) FILTER (WHERE ie.event = 'breaker_open')               AS breaker_opens,
           count(*) FILTER (WHERE ie.event = 'hold_set')                   AS holds,
           count(*) FILTER (WHERE ie.event = 'fleet_stop')                 AS stops,
           count(*) FILTER (WHERE ie.event = 'budget_exhausted')           AS budget_exhausted,
           count(*) FILTER (WHERE ie.event = 'fleet_clear')                AS clears,
           coalesce(sum((ie.counts->>'shed')::bigint) FILTER (WHERE ie.event = 'shed'), 0) AS shed,
           (array_agg(CASE ie.event WHEN 'breaker_open' THEN 'open' WHEN 'breaker_half_open' THEN 'half_open'
                                    ELSE 'closed' END ORDER BY ie.at DESC, ie.event_id DESC)
                FILTER (WHERE ie.event IN ('breaker_open', 'breaker_half_open', 'breaker_close')
                           OR (ie.event = 'fleet_clear' AND split_part(ie.reason, ':', 1) LIKE '%breaker%')))[1]
                                                                           AS breaker_state,
           max(ie.at) FILTER (WHERE ie.event = 'breaker_close'
                                 OR (ie.event = 'fleet_clear' AND split_part(ie.reason, ':', 1) LIKE '%breaker%'))
                                                                           AS closed_at,
           max(ie.busy_until) FILTER (WHERE ie.event IN ('hold_set', 'fleet_stop')) AS held_until,
           max(ie.at) FILTER (WHERE ie.event IN ('hold_set', 'fleet_stop')) AS held_since,
           max(ie.at) FILTER (WHERE ie.event = 'fleet_clear'
                                AND (split_part(ie.reason, ':', 1) LIKE '%hold%'
                                     OR split_part(ie.reason, ':', 1) LIKE '%stop%')) AS hold_cleared_at,
           (array_agg(ie.event ORDER BY ie.at, ie.event_id))[1]            AS first_event,
           (array_agg(ie.reason ORDER BY ie.at, ie.event_id))[1]           AS first_reason,
           coalesce((array_agg(ie.client_id ORDER BY ie.at, ie.event_id) FILTER (WHERE ie.client_id <> ''))[1], '')
                                                                           AS first_client_id,
           (array_agg(ie.reason ORDER BY ie.at, ie.event_id)
                FILTER (WHERE ie.event IN ('breaker_open', 'fleet_stop')))[1] AS first_failure_reason
    FROM incident_events ie
    GROUP BY ie.tenant, ie.bucket, ie.incident_id
    HAVING count(*) FILTER (WHERE ie.event IN ('hold_set', 'breaker_open', 'fleet_stop', 'budget_exhausted')) > 0
), ended AS (
    SELECT g.*,
           CASE WHEN g.breaker_state IN ('open', 'half_open') THEN NULL
                ELSE coalesce(greatest(g.closed_at,
                                       CASE WHEN g.hold_cleared_at >= g.held_since
                                            THEN least(g.held_until, g.hold_cleared_at)
                                            ELSE g.held_until END),
                              g.last_event_at)
           END AS recovered_at
    FROM grouped g
)
SELECT e.*,
       (e.recovered_at IS NULL AND e.last_event_at > now() - interval '10 minutes')
           OR coalesce(e.recovered_at > now(), false)                      AS open,
       least(now(), coalesce(e.recovered_at,
                             CASE WHEN e.last_event_at > now() - interval '10 minutes' THEN now()
                                  ELSE e.last_event_at END))               AS until_at
FROM ended e;

CREATE VIEW incident_attempts AS
SELECT i.tenant,
       i.bucket,
       i.incident_id,
       a.context_id,
       a.attempt,
       a.at,
       a.failure_type,
       a.rule,
       a.http_status,
       a.decision,
       a.stop_reason,
       a.in_scope,
       a.fleet_stopped,
       a.agent,
       a.outcome,
       a.finished_at
FROM incident_spans i
CROSS JOIN LATERAL (
    SELECT x.*,
           fleet_failure_scope(x.failure_type) IS NOT DISTINCT FROM i.scope AS in_scope,
           x.decision IN ('stop', 'fall_back')
               AND CASE i.scope WHEN 'availability' THEN x.stop_reason IN ('CIRCUIT_OPEN', 'RETRY_BUDGET_EXHAUSTED')
                                ELSE x.stop_reason = 'FLEET_STOP' END      AS fleet_stopped,
           c.agent,
           c.outcome,
           c.finished_at
    FROM retry_attempts x
    LEFT JOIN retry_contexts c ON c.id = x.context_id
    WHERE x.tenant = i.tenant
      AND x.at >= i.started_at - interval '60 seconds' AND x.at <= i.until_at
      AND (i.provider = '' OR lower(coalesce(nullif(x.provider, ''), c.provider, '')) = i.provider)
      AND (i.model = '' OR coalesce(nullif(x.model, ''), c.model, '') = i.model)
) a
WHERE a.in_scope OR a.fleet_stopped;

CREATE VIEW incidents AS
SELECT s.incident_id,
       s.tenant,
       s.bucket,
       s.scope,
       s.provider,
       s.model,
       s.key_id,
       s.started_at,
       s.last_event_at,
       s.recovered_at,
       s.open,
       s.first_event,
       s.first_reason,
       s.first_client_id,
       coalesce(j.first_at, s.started_at)                                  AS first_failure_at,
       coalesce(j.first_type,
                substring(s.first_failure_reason FROM '\(last: ([A-Z_]+)\)'),
                substring(s.first_failure_reason FROM '^([A-Z_]+) on key'),
                '')                                                        AS first_failure_type,
       coalesce(j.first_rule, '')                                          AS first_failure_rule,
       j.first_context_id                                                  AS first_failure_context_id,
       coalesce(j.first_agent, '')                                         AS first_failure_agent,
       extract(epoch FROM s.recovered_at - coalesce(j.first_at, s.started_at)) AS recovery_seconds,
       s.breaker_state,
       s.breaker_opens,
       s.holds,
       s.stops,
       s.budget_exhausted,
       s.clears,
       s.events,
       s.shed,
       coalesce(j.failed_attempts, 0)                                      AS failed_attempts,
       coalesce(j.retries_held, 0)                                         AS retries_held,
       coalesce(j.stopped, 0)                                              AS stopped,
       coalesce(j.fell_back, 0)                                            AS fell_back,
       round(coalesce(j.baseline, 0) / 10.0, 3)                            AS baseline_per_second,
       greatest(0, round(coalesce(j.baseline, 0) / 10.0 * extract(epoch FROM s.until_at - s.started_at))
                   - coalesce(j.failed_after_start, 0))::bigint            AS retries_avoided,
       s.until_at
FROM incident_spans s
LEFT JOIN (
    SELECT a.tenant,
           a.bucket,
           a.incident_id,
           min(a.at) FILTER (WHERE a.in_scope)                                            AS first_at,
           (array_agg(a.failure_type ORDER BY a.at, a.context_id, a.attempt) FILTER (WHERE a.in_scope))[1] AS first_type,
           (array_agg(a.rule ORDER BY a.at, a.context_id, a.attempt) FILTER (WHERE a.in_scope))[1]         AS first_rule,
           (array_agg(a.context_id ORDER BY a.at, a.context_id, a.attempt) FILTER (WHERE a.in_scope))[1]   AS first_context_id,
           (array_agg(a.agent ORDER BY a.at, a.context_id, a.attempt) FILTER (WHERE a.in_scope))[1]        AS first_agent,
           count(*) FILTER (WHERE a.in_scope)                                             AS failed_attempts,
           count(*) FILTER (WHERE a.in_scope AND a.decision = 'retry' AND a.at >= s.started_at) AS retries_held,
           count(*) FILTER (WHERE a.fleet_stopped AND a.decision = 'stop')                AS stopped,
           count(*) FILTER (WHERE a.fleet_stopped AND a.decision = 'fall_back')           AS fell_back,
           count(*) FILTER (WHERE a.in_scope AND a.at > s.started_at)                     AS failed_after_start,
           count(*) FILTER (WHERE a.in_scope AND a.at >= s.started_at - interval '10 seconds'
                                             AND a.at <= s.started_at)                    AS baseline
    FROM incident_attempts a
    JOIN incident_spans s USING (tenant, bucket, incident_id)
    GROUP BY a.tenant, a.bucket, a.incident_id
) j USING (tenant, bucket, incident_id);
