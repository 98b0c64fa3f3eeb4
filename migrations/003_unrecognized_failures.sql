-- Which failures does policyd not recognise? So that operators can teach it
-- the frequent ones (docs/rules.md), rather than read attempts one by one:
--
-- * Attempts keep the failure's error name (its class, e.g. "TypeError"),
--   which with the HTTP status, error code and message is what a new rule
--   matches on. Existing attempts get '' (adding a column with a constant
--   default rewrites nothing).
-- * journal_unrecognized_failures groups the attempts classified UNKNOWN
--   (failure_type as the writer stores it: upper-case, without the
--   "FAILURE_TYPE_" prefix) by tenant, so that tenants never mix, and by
--   what a rule could match. A view cannot promise an order: sort it with
--   ORDER BY failures DESC (docs/postmortem.md).
--
-- No index: the view is read by an operator now and then, and an index
-- would cost every attempt's insert.

ALTER TABLE retry_attempts ADD COLUMN error_name text NOT NULL DEFAULT '' CHECK (char_length(error_name) <= 256);

-- Which failures did no rule recognise, how often, in how many contexts,
-- when first and last? The provider is the one the attempt used, else the
-- context's.
CREATE VIEW journal_unrecognized_failures AS
SELECT a.tenant,
       coalesce(nullif(a.provider, ''), c.provider, '') AS provider,
       a.http_status,
       a.error_name,
       a.error_code,
       left(a.message, 80)                              AS message_prefix,
       count(*)                                         AS failures,
       count(DISTINCT a.context_id)                     AS contexts,
       min(a.at)                                        AS first_seen,
       max(a.at)                                        AS last_seen
FROM retry_attempts a
LEFT JOIN retry_contexts c ON c.id = a.context_id
WHERE a.failure_type = 'UNKNOWN'
GROUP BY 1, 2, 3, 4, 5, 6;

---- create above / drop below ----

DROP VIEW journal_unrecognized_failures;
ALTER TABLE retry_attempts DROP COLUMN error_name;
