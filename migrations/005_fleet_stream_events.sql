-- Fleet memory's Coordinate streams: the streams' transitions join the fleet
-- events. 'shed': clients' gates did not admit first attempts (journaled at
-- most once a second per bucket, counts.shed the number); 'slow_start': a
-- breaker closed and the gates admit a rising share of first attempts
-- (counts.window_ms). The CHECK is replaced, not widened in place: PostgreSQL
-- has no ALTER for a CHECK's expression.

ALTER TABLE fleet_events DROP CONSTRAINT fleet_events_event_check;
ALTER TABLE fleet_events ADD CONSTRAINT fleet_events_event_check
    CHECK (event IN ('hold_set', 'breaker_open', 'breaker_half_open', 'breaker_close',
                     'budget_exhausted', 'fleet_stop', 'shed', 'slow_start'));

---- create above / drop below ----

DELETE FROM fleet_events WHERE event IN ('shed', 'slow_start');
ALTER TABLE fleet_events DROP CONSTRAINT fleet_events_event_check;
ALTER TABLE fleet_events ADD CONSTRAINT fleet_events_event_check
    CHECK (event IN ('hold_set', 'breaker_open', 'breaker_half_open', 'breaker_close',
                     'budget_exhausted', 'fleet_stop'));
