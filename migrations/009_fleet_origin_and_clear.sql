-- Who said it, and the operator's way out.
--
-- fleet_events: identity is the caller's authenticated credential
-- ("token:" and the start of the token's SHA-256, or "cert:" CN/serial; ''
-- without authentication) and peer its address (host:port), so that a
-- post-mortem can tell who caused a transition beyond the client id it
-- chose. Two events join: 'tenant_limit' (a tenant reached one of its
-- limits: buckets or reports; at most one a minute per tenant and limit)
-- and 'fleet_clear' (an operator cleared a bucket's state).
--
-- fleet_state: cleared_at and cleared are an operator's last clear of the
-- bucket (the fleet's clock; a bit mask: 1 hold, 2 stop, 4 breaker, 8
-- pace). A clear lowers the registers, which no other write does: each
-- replica applies a clear newer than the last it applied, and no older one.

ALTER TABLE fleet_events
    ADD COLUMN identity text NOT NULL DEFAULT '' CHECK (char_length(identity) <= 256),
    ADD COLUMN peer     text NOT NULL DEFAULT '' CHECK (char_length(peer) <= 256);
ALTER TABLE fleet_events DROP CONSTRAINT fleet_events_event_check;
ALTER TABLE fleet_events ADD CONSTRAINT fleet_events_event_check
    CHECK (event IN ('hold_set', 'breaker_open', 'breaker_half_open', 'breaker_close',
                     'budget_exhausted', 'fleet_stop', 'shed', 'slow_start',
                     'tenant_limit', 'fleet_clear'));

ALTER TABLE fleet_state
    ADD COLUMN cleared_at timestamptz,
    ADD COLUMN cleared    smallint NOT NULL DEFAULT 0 CHECK (cleared BETWEEN 0 AND 15);

---- create above / drop below ----

ALTER TABLE fleet_state DROP COLUMN cleared, DROP COLUMN cleared_at;
DELETE FROM fleet_events WHERE event IN ('tenant_limit', 'fleet_clear');
ALTER TABLE fleet_events DROP CONSTRAINT fleet_events_event_check;
ALTER TABLE fleet_events ADD CONSTRAINT fleet_events_event_check
    CHECK (event IN ('hold_set', 'breaker_open', 'breaker_half_open', 'breaker_close',
                     'budget_exhausted', 'fleet_stop', 'shed', 'slow_start'));
ALTER TABLE fleet_events DROP COLUMN peer, DROP COLUMN identity;
