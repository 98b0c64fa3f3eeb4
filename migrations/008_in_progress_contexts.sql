-- The contexts still in progress, oldest first: what the sweeper that marks
-- idle contexts abandoned (policyd serve --abandon-after) reads about once
-- a minute. Partial, so it holds only the few open contexts and the sweep
-- costs the same on a journal of ten million rows as on an empty one.

CREATE INDEX retry_contexts_in_progress_started_idx ON retry_contexts (started_at) WHERE outcome = 'in_progress';

---- create above / drop below ----

DROP INDEX IF EXISTS retry_contexts_in_progress_started_idx;
