-- The learned fallback (the classifier's rule "learned") answers some
-- failures no rule recognises with a type guessed from the labelled failures
-- they resemble, so they are no longer journaled as UNKNOWN. They are still
-- the failures to teach policyd, so journal_unrecognized_failures keeps them:
-- it groups the attempts classified UNKNOWN or by rule "learned", and gains,
-- at the end of its columns:
--   guessed: how many of the group's failures the learned fallback answered.
-- The view is replaced in place (its columns only grow); the down migration
-- drops it and creates it again as 003 made it.

CREATE OR REPLACE VIEW journal_unrecognized_failures AS
SELECT a.tenant,
       coalesce(nullif(a.provider, ''), c.provider, '') AS provider,
       a.http_status,
       a.error_name,
       a.error_code,
       left(a.message, 80)                              AS message_prefix,
       count(*)                                         AS failures,
       count(DISTINCT a.context_id)                     AS contexts,
       min(a.at)                                        AS first_seen,
       max(a.at)                                        AS last_seen,
       count(*) FILTER (WHERE a.rule = 'learned')       AS guessed
FROM retry_attempts a
LEFT JOIN retry_contexts c ON c.id = a.context_id
WHERE a.failure_type = 'UNKNOWN' OR a.rule = 'learned'
GROUP BY 1, 2, 3, 4, 5, 6;

---- create above / drop below ----

DROP VIEW journal_unrecognized_failures;
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
