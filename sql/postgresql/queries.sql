-- Named statements the Python client runs (pyqueue_sql/queries.py loads them).
-- Each calls one contract routine; parameters use %(name)s.

-- name: create
SELECT queue_create(%(queue)s, %(visibility_timeout)s::interval, %(max_attempts)s::integer,
                    %(dead_letter_queue)s, %(history_retention)s::interval)

-- name: drop
SELECT queue_drop(%(queue)s)

-- name: push
SELECT queue_push(%(queue)s, %(key)s, %(kind)s, %(payload)s::jsonb,
                  %(run_at)s::timestamptz, %(priority)s::integer)

-- name: push_batch
SELECT queue_push_batch(%(queue)s, %(keys)s::text[], %(kinds)s::text[], %(payloads)s::jsonb[],
                        %(run_ats)s::timestamptz[], %(priorities)s::integer[])

-- name: pop
SELECT p_key, p_kind, payload, priority, attempts, created_at
  FROM queue_pop(%(queue)s, %(n)s::integer)

-- name: reserve
SELECT p_key, p_kind, payload, token, priority, attempts, created_at, scheduled_at_initially
  FROM queue_reserve(%(queue)s, %(worker)s, %(timeout)s::interval, %(n)s::integer, %(kinds)s::text[])

-- name: commit
SELECT queue_commit(%(queue)s, %(key)s, %(kind)s, %(token)s::uuid)

-- name: rollback
SELECT queue_rollback(%(queue)s, %(key)s, %(kind)s, %(token)s::uuid, %(delay)s::interval)

-- name: extend
SELECT queue_extend(%(queue)s, %(key)s, %(kind)s, %(token)s::uuid, %(timeout)s::interval)

-- name: move
SELECT queue_move(%(queue)s, %(key)s, %(kind)s, %(token)s::uuid, %(to_queue)s, %(payload)s::jsonb)

-- name: remove
SELECT queue_remove(%(queue)s, %(key)s, %(kind)s)

-- name: pause
SELECT queue_pause(%(queue)s)

-- name: resume
SELECT queue_resume(%(queue)s)

-- name: stats
SELECT queue, ready, delayed, reserved, dead, oldest_ready_age_s, paused
  FROM queue_stats(%(queue)s)

-- name: migration_lock
-- Released by the commit of the migrating transaction (DDL is transactional here).
SELECT pg_advisory_xact_lock(hashtext('pyqueue-sql migrations'))


-- ---- issue 3: wakeups ----

-- ---- end of issue 3 ----


-- ---- issue 6: fast paths ----

-- name: commit_reserve
SELECT committed, p_key, p_kind, payload, token, priority, attempts, created_at, scheduled_at_initially
  FROM queue_commit_reserve(%(queue)s, %(key)s, %(kind)s, %(token)s::uuid, %(worker)s,
                            %(timeout)s::interval, %(n)s::integer, %(kinds)s::text[])

-- name: commit_batch
SELECT queue_commit_batch(%(queue)s, %(keys)s::text[], %(kinds)s::text[], %(tokens)s::uuid[])

-- ---- end of issue 6 ----


-- ---- issue 5: queue_ingest ----

-- ---- end of issue 5 ----


-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- ---- end of issue 4 ----


