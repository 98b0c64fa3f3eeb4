-- The journal's two hot tables stop re-checking, row by row, the bounds the
-- writer (package internal/journal) already enforces before a row is queued:
-- lengths of names and texts, the attempt number, statuses, delays and the
-- labels' shape. PostgreSQL rebuilt the 24 CHECK expressions at every
-- execution of the writer's statement (about 27 µs a batch) and evaluated
-- them for every row, for rows that could not fail them.
--
-- Kept: NOT NULL, the primary keys, and the two checks that guard a
-- context's state (outcome, and outcome against finished_at), which an
-- operator's manual UPDATE could otherwise break.
--
-- The stored message's length is now a setting (policyd serve
-- --journal-message-chars), no longer fixed at 1024 characters here.

ALTER TABLE retry_attempts
    DROP CONSTRAINT retry_attempts_attempt_check,
    DROP CONSTRAINT retry_attempts_decision_check,
    DROP CONSTRAINT retry_attempts_delay_ms_check,
    DROP CONSTRAINT retry_attempts_duration_ms_check,
    DROP CONSTRAINT retry_attempts_error_code_check,
    DROP CONSTRAINT retry_attempts_error_name_check,
    DROP CONSTRAINT retry_attempts_failure_type_check,
    DROP CONSTRAINT retry_attempts_fallback_check,
    DROP CONSTRAINT retry_attempts_http_status_check,
    DROP CONSTRAINT retry_attempts_message_check,
    DROP CONSTRAINT retry_attempts_model_check,
    DROP CONSTRAINT retry_attempts_provider_check,
    DROP CONSTRAINT retry_attempts_recovery_action_check,
    DROP CONSTRAINT retry_attempts_rule_check,
    DROP CONSTRAINT retry_attempts_stop_reason_check,
    DROP CONSTRAINT retry_attempts_strategy_check,
    DROP CONSTRAINT retry_attempts_tenant_check;

ALTER TABLE retry_contexts
    DROP CONSTRAINT retry_contexts_agent_check,
    DROP CONSTRAINT retry_contexts_labels_check,
    DROP CONSTRAINT retry_contexts_model_check,
    DROP CONSTRAINT retry_contexts_operation_check,
    DROP CONSTRAINT retry_contexts_profile_check,
    DROP CONSTRAINT retry_contexts_provider_check,
    DROP CONSTRAINT retry_contexts_tenant_check;

---- create above / drop below ----

-- NOT VALID: rows written meanwhile (a message longer than 1024 characters,
-- under a raised --journal-message-chars) stay; new rows are checked again.
ALTER TABLE retry_contexts
    ADD CONSTRAINT retry_contexts_agent_check CHECK (char_length(agent) <= 256) NOT VALID,
    ADD CONSTRAINT retry_contexts_labels_check
        CHECK (jsonb_typeof(labels) = 'object' AND pg_column_size(labels) <= 8192) NOT VALID,
    ADD CONSTRAINT retry_contexts_model_check CHECK (char_length(model) <= 256) NOT VALID,
    ADD CONSTRAINT retry_contexts_operation_check CHECK (char_length(operation) <= 256) NOT VALID,
    ADD CONSTRAINT retry_contexts_profile_check CHECK (char_length(profile) <= 256) NOT VALID,
    ADD CONSTRAINT retry_contexts_provider_check CHECK (char_length(provider) <= 256) NOT VALID,
    ADD CONSTRAINT retry_contexts_tenant_check CHECK (char_length(tenant) <= 256) NOT VALID;

ALTER TABLE retry_attempts
    ADD CONSTRAINT retry_attempts_attempt_check CHECK (attempt BETWEEN 1 AND 1000) NOT VALID,
    ADD CONSTRAINT retry_attempts_decision_check CHECK (decision IN ('retry', 'stop', 'fall_back')) NOT VALID,
    ADD CONSTRAINT retry_attempts_delay_ms_check CHECK (delay_ms >= 0) NOT VALID,
    ADD CONSTRAINT retry_attempts_duration_ms_check CHECK (duration_ms >= 0) NOT VALID,
    ADD CONSTRAINT retry_attempts_error_code_check CHECK (char_length(error_code) <= 256) NOT VALID,
    ADD CONSTRAINT retry_attempts_error_name_check CHECK (char_length(error_name) <= 256) NOT VALID,
    ADD CONSTRAINT retry_attempts_failure_type_check CHECK (char_length(failure_type) <= 256) NOT VALID,
    ADD CONSTRAINT retry_attempts_fallback_check CHECK (char_length(fallback) <= 256) NOT VALID,
    ADD CONSTRAINT retry_attempts_http_status_check
        CHECK (http_status = 0 OR http_status BETWEEN 100 AND 999) NOT VALID,
    ADD CONSTRAINT retry_attempts_message_check CHECK (char_length(message) <= 1024) NOT VALID,
    ADD CONSTRAINT retry_attempts_model_check CHECK (char_length(model) <= 256) NOT VALID,
    ADD CONSTRAINT retry_attempts_provider_check CHECK (char_length(provider) <= 256) NOT VALID,
    ADD CONSTRAINT retry_attempts_recovery_action_check CHECK (char_length(recovery_action) <= 1024) NOT VALID,
    ADD CONSTRAINT retry_attempts_rule_check CHECK (char_length(rule) <= 256) NOT VALID,
    ADD CONSTRAINT retry_attempts_stop_reason_check CHECK (char_length(stop_reason) <= 1024) NOT VALID,
    ADD CONSTRAINT retry_attempts_strategy_check CHECK (char_length(strategy) <= 1024) NOT VALID,
    ADD CONSTRAINT retry_attempts_tenant_check CHECK (char_length(tenant) <= 256) NOT VALID;
