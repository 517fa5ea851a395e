-- Named statements the Python client runs (pyqueue_sql/queries.py loads them).
-- Each calls one contract procedure; parameters use %(name)s. Durations are
-- seconds, times are UTC DATETIME(6) values.

-- name: create
CALL queue_create(%(queue)s, %(visibility_timeout)s, %(max_attempts)s, %(dead_letter_queue)s,
                  %(history_retention)s)

-- name: drop
CALL queue_drop(%(queue)s)

-- name: push
CALL queue_push(%(queue)s, %(key)s, %(kind)s, %(payload)s, %(run_at)s, %(priority)s)

-- name: push_batch
CALL queue_push_batch(%(queue)s, %(messages)s, NULL, NULL, NULL, NULL)

-- name: pop
CALL queue_pop(%(queue)s, %(n)s)

-- name: reserve
CALL queue_reserve(%(queue)s, %(worker)s, %(timeout)s, %(n)s, %(kinds)s)

-- name: commit
CALL queue_commit(%(queue)s, %(key)s, %(kind)s, %(token)s)

-- name: rollback
CALL queue_rollback(%(queue)s, %(key)s, %(kind)s, %(token)s, %(delay)s)

-- name: extend
CALL queue_extend(%(queue)s, %(key)s, %(kind)s, %(token)s, %(timeout)s)

-- name: move
CALL queue_move(%(queue)s, %(key)s, %(kind)s, %(token)s, %(to_queue)s, %(payload)s)

-- name: remove
CALL queue_remove(%(queue)s, %(key)s, %(kind)s)

-- name: pause
CALL queue_pause(%(queue)s)

-- name: resume
CALL queue_resume(%(queue)s)

-- name: stats
CALL queue_stats(%(queue)s)

-- name: migration_lock
SELECT GET_LOCK('pyqueue-sql migrations', 600)

-- name: migration_unlock
-- Issued after the version table's change is committed.
SELECT RELEASE_LOCK('pyqueue-sql migrations')


-- ---- issue 3: wakeups ----

-- ---- end of issue 3 ----


-- ---- issue 6: fast paths ----

-- name: commit_reserve
-- Two result sets: the reserved rows, then one row (committed).
CALL queue_commit_reserve(%(queue)s, %(key)s, %(kind)s, %(token)s, %(worker)s, %(timeout)s, %(n)s,
                          %(kinds)s)

-- name: commit_batch
CALL queue_commit_batch(%(queue)s, %(keys)s, %(kinds)s, %(tokens)s)

-- ---- end of issue 6 ----


-- ---- issue 5: queue_ingest ----

-- ---- end of issue 5 ----


-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- ---- end of issue 4 ----


