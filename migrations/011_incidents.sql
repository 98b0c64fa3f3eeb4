-- Incidents: one bucket's trouble, from its first failure to its recovery,
-- read back from fleet_events and the journal's attempts.
--
-- * A bucket's events (every fleet_events row but tenant_limit, which is
--   about a tenant, not a bucket) fall into incidents: an event continues
--   the bucket's incident when it comes less than 60 seconds after the
--   later of the previous event and the end of every hold, fleet stop and
--   open period set so far (at + counts.hold_ms, stop_ms, open_ms). 60
--   seconds is the fleet's own incident gap (internal/fleet, incidentGap: a
--   failure after that long without one starts a new run of them), and the
--   gap journal_fleet_first_failures cuts at. The end of a hold or an open
--   period counts because the fleet journals nothing while one lasts: a
--   5-minute hold is one event.
-- * An incident is trouble the fleet saw: a run of events with at least
--   one hold_set, breaker_open, fleet_stop or budget_exhausted (failures
--   caused them). A run of other events alone is none: the clients' gates
--   shed a target's first attempts in every bucket of the target (its rate
--   limit's too) while one of them is in trouble, and a breaker's close can
--   come after its open period and the gap.
-- * An incident's id is the id of its first event (fleet_events.id).
-- * The journal adds what the events do not hold. An attempt is the
--   bucket's when it has the incident's tenant, provider (lower case, as
--   buckets name it) and model (when the bucket names one), and its failure
--   type is of the bucket's scope (fleet_failure_scope) or its decision
--   was the fleet's stop of that scope (CIRCUIT_OPEN and
--   RETRY_BUDGET_EXHAUSTED for availability, FLEET_STOP for rate_limit
--   and auth). The journal does not keep the key id, so a rate_limit or
--   auth incident also counts the same provider's failures on other keys in
--   its time.

-- fleet_failure_scope is the fleet scope of a failure type as the journal
-- spells it (retry_attempts.failure_type), NULL for the types the fleet
-- does not track. It is the mapping of internal/fleet's ScopeOf; a test
-- checks that the two agree for every failure type.
CREATE FUNCTION fleet_failure_scope(failure_type text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE failure_type
        WHEN 'RATE_LIMIT' THEN 'rate_limit'
        WHEN 'QUOTA_EXHAUSTED' THEN 'rate_limit'
        WHEN 'OVERLOADED' THEN 'availability'
        WHEN 'SERVER_ERROR' THEN 'availability'
        WHEN 'TIMEOUT' THEN 'availability'
        WHEN 'CONNECTION_ERROR' THEN 'availability'
        WHEN 'STREAM_INTERRUPTED' THEN 'availability'
        WHEN 'AUTH_INVALID' THEN 'auth'
        WHEN 'PERMISSION_DENIED' THEN 'auth'
    END;

-- Every fleet event of a bucket with the incident it belongs to, and
-- busy_until: the end of the hold, stop or open period it set (its own time
-- for the other events). A GetIncident timeline is this view's rows of one
-- incident_id, ordered by (at, event_id).
CREATE VIEW incident_events AS
WITH bounded AS (
    SELECT e.*,
           e.at + CASE e.event
                      WHEN 'hold_set'     THEN coalesce((e.counts->>'hold_ms')::bigint, 0)
                      WHEN 'fleet_stop'   THEN coalesce((e.counts->>'stop_ms')::bigint, 0)
                      WHEN 'breaker_open' THEN coalesce((e.counts->>'open_ms')::bigint, 0)
                      ELSE 0
                  END * interval '1 millisecond' AS busy_until
    FROM fleet_events e
    WHERE e.event <> 'tenant_limit'
), marked AS (
    SELECT b.*,
           CASE WHEN b.at < max(b.busy_until) OVER (PARTITION BY b.tenant, b.bucket ORDER BY b.at, b.id
                                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                            + interval '60 seconds'
                THEN 0 ELSE 1 END AS starts
    FROM bounded b
), numbered AS (
    SELECT m.*, sum(m.starts) OVER (PARTITION BY m.tenant, m.bucket ORDER BY m.at, m.id) AS n
    FROM marked m
)
SELECT first_value(x.id) OVER (PARTITION BY x.tenant, x.bucket, x.n ORDER BY x.at, x.id) AS incident_id,
       x.id AS event_id,
       x.at,
       x.tenant,
       x.bucket,
       x.scope,
       x.provider,
       x.model,
       x.key_id,
       x.event,
       x.reason,
       x.client_id,
       x.replica,
       x.identity,
       x.peer,
       x.counts,
       x.busy_until
FROM numbered x;

-- One row per incident: what its events say, and the span its journal
-- counts cover. Columns:
--   started_at, last_event_at: the incident's first and last event.
--   recovered_at: when the bucket was well again: the breaker's last close
--     (or an operator's clear of it), or the end of the last hold or stop
--     (cut short by an operator's clear), whichever is later; the last event
--     for an incident with none of those (shed, budget). NULL while the
--     breaker is open or half-open.
--   open: the bucket is still in trouble: not recovered yet, or its hold or
--     stop ends in the future. A breaker that journaled nothing for 10
--     minutes (the fleet forgets an idle bucket then) is taken as lost with
--     its daemon: that incident is not open, and has no recovered_at.
--   until_at: where the incident's journal counts stop: its recovery, now
--     while it is open, its last event when its breaker was lost.
--   breaker_state: the breaker's last move ('open', 'half_open', 'closed');
--     NULL when the incident moved no breaker.
--   breaker_opens, holds, stops, budget_exhausted, clears, events: counts of
--     those events; shed: the first attempts the clients' gates did not send
--     (the sum of the shed events' counts.shed).
--   first_event, first_reason: the first event; first_client_id: the client
--     named by the first event that names one (a hold's or a stop's first
--     failure, or the failure that opened the breaker).
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

-- Every journaled attempt of each incident's bucket from a minute before the
-- incident's first event (failures precede the breaker they open) to its
-- until_at. in_scope: the failure is of the bucket's scope; fleet_stopped:
-- the fleet stopped the retry, or sent it to a fallback, for this scope.
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

-- One row per incident: incident_spans' columns, and what the journal adds:
--   first_failure_at, _type, _rule, _context_id, _agent: the incident's earliest
--     journaled failure of the bucket's scope; without one, the first event's
--     time, and the type read off the first breaker_open's reason ("last:
--     OVERLOADED") or fleet_stop's ("AUTH_INVALID on key ...").
--   recovery_seconds: from the first failure to recovered_at.
--   failed_attempts: the journaled failures of the bucket's scope;
--     retries_held: the RETRY decisions among them from the first event on
--     (the fleet held them: a streaming client's gate parks them until the
--     daemon releases them, others wait out their release slot); stopped,
--     fell_back: retries the fleet turned into a stop or a fallback.
--   baseline_per_second: the journaled failures in the 10 seconds (the
--     breaker's window) up to the first event, per second: the rate at which
--     the agents were sending failing attempts when the fleet stepped in.
--   retries_avoided: an estimate of the attempts the fleet spared the
--     provider: what the agents would have sent had they gone on at the
--     baseline rate until the incident's until_at, less what they did send:
--       greatest(0, round(baseline_per_second × seconds from started_at to
--                         until_at) − failures journaled after started_at)
--     Both terms count only agents that journal (pass a context id). Agents
--     that back off on their own would have sent less than the baseline
--     rate: read it as an upper bound of what those agents were spared.
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

---- create above / drop below ----

DROP VIEW IF EXISTS incidents;
DROP VIEW IF EXISTS incident_attempts;
DROP VIEW IF EXISTS incident_spans;
DROP VIEW IF EXISTS incident_events;
DROP FUNCTION IF EXISTS fleet_failure_scope(text);
