-- Every pace change says why in the journal: 'pace' events join the fleet
-- events, for a learnt request limit's pace that started (corroborated by a
-- 429 or a second client), was cut after 429s (at most one event a second
-- per bucket, counts.cuts the cuts it covers), was lifted by a success's
-- headers, or ended (the limit expired). counts.rpm is the limit and
-- counts.share_pct the share of it the gates pace to.

ALTER TABLE fleet_events DROP CONSTRAINT fleet_events_event_check;
ALTER TABLE fleet_events ADD CONSTRAINT fleet_events_event_check
    CHECK (event IN ('hold_set', 'breaker_open', 'breaker_half_open', 'breaker_close',
                     'budget_exhausted', 'fleet_stop', 'shed', 'slow_start',
                     'tenant_limit', 'fleet_clear', 'pace'));

---- create above / drop below ----

DELETE FROM fleet_events WHERE event = 'pace';
ALTER TABLE fleet_events DROP CONSTRAINT fleet_events_event_check;
ALTER TABLE fleet_events ADD CONSTRAINT fleet_events_event_check
    CHECK (event IN ('hold_set', 'breaker_open', 'breaker_half_open', 'breaker_close',
                     'budget_exhausted', 'fleet_stop', 'shed', 'slow_start',
                     'tenant_limit', 'fleet_clear'));
