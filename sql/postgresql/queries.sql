-- Named statements the Python client runs (pyqueue_sql/queries.py loads them).
-- Each calls one contract routine; parameters use %(name)s, arrays %(name)b: psycopg sends those
-- in the binary format, element by element, where the text format escapes every element that
-- needs quotes (each JSON payload) with a regular expression, about 10 µs a message of client CPU.
-- Sections by topic, in the order of the files of routines/ (../README.md lists the topics).


-- ==== queues ====
-- The queues: create, change, read back, drop, pause, resume, count.

-- name: create
SELECT queue_create(%(queue)s, %(visibility_timeout)s::interval, %(max_attempts)s::integer,
                    %(dead_letter_queue)s, %(history_retention)s::interval)

-- name: reset_setting
SELECT queue_reset_setting(%(queue)s, %(setting)s)

-- name: settings
SELECT queue, visibility_timeout, max_attempts, dead_letter_queue, history_retention, paused,
       notify_window, max_reservation, max_payload, result_retention
  FROM queue_settings(%(queue)s)

-- name: set_max_reservation
SELECT queue_set_max_reservation(%(queue)s, %(max_reservation)s::interval)

-- name: set_max_payload
SELECT queue_set_max_payload(%(queue)s, %(max_payload)s::integer)

-- name: drop
SELECT queue_drop(%(queue)s)

-- name: pause
SELECT queue_pause(%(queue)s)

-- name: resume
SELECT queue_resume(%(queue)s)

-- name: stats
SELECT queue, ready, delayed, reserved, dead, oldest_ready_age_s, paused
  FROM queue_stats(%(queue)s)

-- name: kind_stats
SELECT queue, kind, ready, delayed, reserved
  FROM queue_kind_stats(%(queue)s)


-- ==== produce ====
-- Putting messages in.

-- name: push
SELECT queue_push(%(queue)s, %(key)s, %(kind)s, %(payload)s::jsonb,
                  %(run_at)s::timestamptz, %(priority)s::integer)

-- name: push_with_headers
-- push with headers (a JSON object): the sibling routine, so that a push without them costs nothing more.
SELECT queue_push_with_headers(%(queue)s, %(key)s, %(kind)s, %(payload)s::jsonb,
                               %(run_at)s::timestamptz, %(priority)s::integer, %(headers)s::jsonb)

-- name: push_batch
SELECT queue_push_batch(%(queue)s, %(keys)b::text[], %(kinds)b::text[], %(payloads)b::jsonb[],
                        %(run_ats)b::timestamptz[], %(priorities)b::integer[])

-- name: push_batch_with_headers
-- headers: one element per message, NULL = none.
SELECT queue_push_batch_with_headers(%(queue)s, %(keys)b::text[], %(kinds)b::text[], %(payloads)b::jsonb[],
                                     %(run_ats)b::timestamptz[], %(priorities)b::integer[],
                                     %(headers)b::jsonb[])

-- name: push_replace
SELECT queue_push_replace(%(queue)s, %(key)s, %(kind)s, %(payload)s::jsonb,
                          %(run_at)s::timestamptz, %(priority)s::integer)

-- name: push_grouped
SELECT queue_push_grouped(in_queue => %(queue)s, in_group => %(group)s, in_key => %(key)s,
                          in_kind => %(kind)s, in_payload => %(payload)s::jsonb,
                          in_run_at => %(run_at)s::timestamptz, in_priority => %(priority)s::integer)

-- name: push_grouped_with_headers
SELECT queue_push_grouped_with_headers(%(queue)s, %(group)s, %(key)s, %(kind)s, %(payload)s::jsonb,
                                       %(run_at)s::timestamptz, %(priority)s::integer, %(headers)s::jsonb)

-- name: push_batch_grouped
-- groups: one element per message, NULL = no group.
SELECT queue_push_batch_grouped(in_queue => %(queue)s, in_groups => %(groups)b::text[],
                                in_keys => %(keys)b::text[], in_kinds => %(kinds)b::text[],
                                in_payloads => %(payloads)b::jsonb[],
                                in_run_ats => %(run_ats)b::timestamptz[],
                                in_priorities => %(priorities)b::integer[])

-- name: push_batch_grouped_with_headers
SELECT queue_push_batch_grouped_with_headers(%(queue)s, %(groups)b::text[], %(keys)b::text[],
                                             %(kinds)b::text[], %(payloads)b::jsonb[],
                                             %(run_ats)b::timestamptz[], %(priorities)b::integer[],
                                             %(headers)b::jsonb[])


-- ==== reserve ====
-- Taking messages out: reserve (a token for every later step) or pop.

-- name: pop
SELECT p_key, p_kind, payload, priority, attempts, created_at, headers
  FROM queue_pop(%(queue)s, %(n)s::integer)

-- The token comes back as text (what the client hands out): psycopg's uuid.UUID for it and its str()
-- took about a third of the client's time per reserved row.
-- name: reserve
SELECT p_key, p_kind, payload, token::text, priority, attempts, created_at, scheduled_at_initially,
       headers
  FROM queue_reserve(%(queue)s, %(worker)s, %(timeout)s::interval, %(n)s::integer, %(kinds)b::text[])


-- ==== settle ====
-- Finishing a reserved message: commit, roll back, fail, give up, snooze, extend, move; remove, release.

-- name: commit
SELECT queue_commit(%(queue)s, %(key)s, %(kind)s, %(token)s::text)

-- name: rollback
SELECT queue_rollback(%(queue)s, %(key)s, %(kind)s, %(token)s::text, %(delay)s::interval)

-- name: fail
SELECT queue_fail(%(queue)s, %(key)s, %(kind)s, %(token)s::text, %(delay)s::interval, %(error)s)

-- name: give_up
SELECT queue_give_up(%(queue)s, %(key)s, %(kind)s, %(token)s::text, %(error)s)

-- name: snooze
SELECT queue_snooze(%(queue)s, %(key)s, %(kind)s, %(token)s::text, %(delay)s::interval)

-- name: release
SELECT queue_release(%(queue)s, %(worker)s)

-- name: extend
SELECT queue_extend(%(queue)s, %(key)s, %(kind)s, %(token)s::text, %(timeout)s::interval)

-- name: move
SELECT queue_move(%(queue)s, %(key)s, %(kind)s, %(token)s::text, %(to_queue)s, %(payload)s::jsonb)

-- name: remove
SELECT queue_remove(%(queue)s, %(key)s, %(kind)s)


-- ==== groups ====
-- FIFO groups: how many of a group's messages may be live at once.

-- name: set_group_limit
SELECT queue_set_group_limit(%(queue)s, %(group)s::text, %(k)s::integer)


-- ==== wakeups ====
-- Waiting for work without polling hard.

-- name: channel
SELECT queue_channel(%(queue)s)

-- name: set_notify_window
SELECT queue_set_notify_window(%(queue)s, %(window)s::interval)

-- name: next_scheduled_at
SELECT next_scheduled_at, wait_s FROM queue_next_scheduled_at(%(queue)s, %(kinds)b::text[])

-- name: wait
SELECT queue_wait(%(queue)s, %(kinds)b::text[], %(timeout)s::interval, %(poll)s::interval)

-- name: listen
-- {channel} is filled in as a quoted identifier (LISTEN takes no parameters).
LISTEN {channel}


-- Coming due without the wait: the time machine of the test helpers (pyqueue_sql.timetravel).
-- Every stored time of the messages (their expiries too), outcomes, history and rate windows moved
-- %(seconds)s into the past, as if that much time had passed. A blocked or waiting message's scheduled_at (the sentinel) is no time: kept.
-- A schedule's next_at is kept too (its pending occurrence's key names it): the occurrence's
-- message moves, and its commit schedules the next one after the real now.

-- name: testing_advance_messages
UPDATE pyqueue_message
   SET scheduled_at = CASE WHEN scheduled_at = TIMESTAMPTZ '9999-12-31 23:59:59.999999+00' THEN scheduled_at
                           ELSE scheduled_at - make_interval(secs => %(seconds)s) END,
       scheduled_at_initially = scheduled_at_initially - make_interval(secs => %(seconds)s),
       created_at = created_at - make_interval(secs => %(seconds)s),
       cancel_requested_at = cancel_requested_at - make_interval(secs => %(seconds)s),
       -- an expiry (the header pyqueue.expires_at, a UTC time of one format) moves with the clock
       headers = CASE WHEN jsonb_typeof(headers -> 'pyqueue.expires_at') = 'string'
                      THEN jsonb_set(headers, '{pyqueue.expires_at}',
                                     to_jsonb(to_char(((headers ->> 'pyqueue.expires_at')::timestamptz
                                                       - make_interval(secs => %(seconds)s)) AT TIME ZONE 'UTC',
                                                      'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')))
                      ELSE headers END

-- name: testing_advance_results
UPDATE pyqueue_result SET finished_at = finished_at - make_interval(secs => %(seconds)s)

-- name: testing_advance_history
UPDATE pyqueue_history
   SET created_at = created_at - make_interval(secs => %(seconds)s),
       processed_at = processed_at - make_interval(secs => %(seconds)s)

-- name: testing_advance_rates
UPDATE pyqueue_rate_slot SET used_at = used_at - make_interval(secs => %(seconds)s) WHERE used_at IS NOT NULL

-- name: testing_advance_ready_from
-- the messages moved below where the reserve starts reading (which only real time moves up): start it over
UPDATE pyqueue_ready_from SET ready_from = '-infinity', ready_from_id = NULL, next_from = NULL, next_xid = NULL

-- name: testing_clock_database
-- which database the test clock moves (its offset is kept per database)
SELECT pg_catalog.current_database()::text AS name

-- name: testing_settle_occurrences
-- the test clock: the pending occurrence of a schedule is due at its time (its key's, the schedule's
-- next_at) less how far the clock moved since the schedule was made; the one a commit has just
-- pushed is due at its key's time, as if no time had passed
UPDATE pyqueue_message m
   SET scheduled_at = s.next_at - make_interval(secs => %(seconds)s),
       scheduled_at_initially = s.next_at - make_interval(secs => %(seconds)s)
  FROM pyqueue_schedule s
 WHERE m.queue_name = s.queue_name AND m.p_kind = s.p_kind
   AND m.p_key = s.p_key || '@' || to_char(s.next_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
   AND s.queue_name = %(queue)s AND s.p_key = %(key)s AND s.p_kind = %(kind)s
   AND m.reserve_token IS NULL AND m.scheduled_at = m.scheduled_at_initially
   AND m.scheduled_at <> s.next_at - make_interval(secs => %(seconds)s)


-- ==== fast paths ====
-- Two steps of the consume cycle in one call.

-- name: commit_reserve
SELECT committed, p_key, p_kind, payload, token::text, priority, attempts, created_at, scheduled_at_initially,
       headers
  FROM queue_commit_reserve(%(queue)s, %(key)s, %(kind)s, %(token)s::text, %(worker)s,
                            %(timeout)s::interval, %(n)s::integer, %(kinds)b::text[])

-- name: commit_batch
SELECT queue_commit_batch(%(queue)s, %(keys)b::text[], %(kinds)b::text[], %(tokens)b::text[])


-- ==== topics ====
-- Publishing to the queues bound to a topic pattern, and the bindings.

-- name: publish
SELECT queue_publish(in_topic => %(topic)s, in_key => %(key)s, in_kind => %(kind)s,
                     in_payload => %(payload)s::jsonb, in_run_at => %(run_at)s::timestamptz,
                     in_priority => %(priority)s::integer)

-- name: publish_with_headers
SELECT queue_publish_with_headers(%(topic)s, %(key)s, %(kind)s, %(payload)s::jsonb,
                                  %(run_at)s::timestamptz, %(priority)s::integer, %(headers)s::jsonb)

-- name: publish_batch
SELECT queue_publish_batch(in_topics => %(topics)b::text[], in_keys => %(keys)b::text[],
                           in_kinds => %(kinds)b::text[], in_payloads => %(payloads)b::jsonb[],
                           in_run_ats => %(run_ats)b::timestamptz[],
                           in_priorities => %(priorities)b::integer[])

-- name: publish_batch_with_headers
SELECT queue_publish_batch_with_headers(%(topics)b::text[], %(keys)b::text[], %(kinds)b::text[],
                                        %(payloads)b::jsonb[], %(run_ats)b::timestamptz[],
                                        %(priorities)b::integer[], %(headers)b::jsonb[])

-- name: bind
SELECT queue_bind(in_pattern => %(pattern)s, in_queue => %(queue)s)

-- name: unbind
SELECT queue_unbind(in_pattern => %(pattern)s, in_queue => %(queue)s)

-- name: bindings
SELECT pattern, queue, created_at FROM queue_bindings(in_queue => %(queue)s)


-- ==== history and dead letters ====
-- History, dead letters, and one message's state and history.

-- name: purge_history
SELECT queue_purge_history(%(queue)s, %(n)s::integer)

-- name: replay
SELECT queue_replay(%(queue)s, %(start)s::timestamptz, %(end)s::timestamptz)

-- name: redrive
SELECT queue_redrive(%(queue)s, %(to_queue)s, %(n)s::integer)

-- name: dead_letters
SELECT dead_letter_queue, from_queue, p_key, p_kind, payload, priority, attempts, created_at,
       dead_lettered_at, reserved, last_error, headers
  FROM queue_dead_letters(%(queue)s)

-- name: message
SELECT p_key, p_kind, state, payload, priority, attempts, scheduled_at, created_at, reserved_by,
       last_error, dead_from, progress, cancel_requested, headers
  FROM queue_message(%(queue)s, %(key)s, %(kind)s)

-- name: message_history
SELECT processed_at, outcome, to_queue, attempts, reserved_by, last_error
  FROM queue_message_history(%(queue)s, %(key)s, %(kind)s)


-- ==== browse ====
-- Reads for browsing a queue and its traffic.

-- name: messages
SELECT p_key, p_kind, state, priority, attempts, scheduled_at, created_at, reserved_by, last_error,
       dead_from, headers
  FROM queue_messages(%(queue)s, %(state)s, %(key_prefix)s, %(after_key)s, %(after_kind)s, %(n)s::integer)

-- name: throughput
SELECT queue, minute, committed, dead_lettered, moved, popped
  FROM queue_throughput(%(queue)s, %(since)s::timestamptz)

-- name: groups
SELECT group_key, head_key, head_kind, head_state, messages, group_limit, in_flight
  FROM queue_groups(in_queue => %(queue)s, in_n => %(n)s::integer)

-- name: horizon
SELECT oldest_age_s, backlog, holder, pid, user_name, state, xact_start, query_start FROM queue_horizon()


-- ==== results ====
-- A finished message's result, waiting for it, cancelling, and what its consumer reports.

-- name: set_result_retention
SELECT queue_set_result_retention(%(queue)s, %(retention)s::interval)

-- name: result
SELECT state, result, last_error, attempts, progress, finished_at, cancel_requested
  FROM queue_result(%(queue)s, %(key)s, %(kind)s)

-- name: results
-- newest first, a page of n (NULL: 100); before: NULL or a time (the next page: the last row's finished_at)
SELECT p_key, p_kind, state, result, last_error, attempts, progress, finished_at
  FROM queue_results(%(queue)s, %(kind)s, %(state)s, %(n)s::integer, %(before)s::timestamptz)

-- name: purge_results
SELECT queue_purge_results(%(queue)s, %(state)s, %(before)s::timestamptz, %(n)s::integer)

-- name: result_wait
SELECT state, result, last_error, attempts, progress, finished_at, cancel_requested
  FROM queue_result_wait(%(queue)s, %(key)s, %(kind)s, %(timeout)s::interval)

-- name: result_channel
SELECT queue_result_channel(%(queue)s)

-- name: unlisten
-- {channel} is filled in as a quoted identifier (UNLISTEN takes no parameters).
UNLISTEN {channel}

-- name: cancel
SELECT queue_cancel(%(queue)s, %(key)s, %(kind)s)

-- name: commit_result
SELECT queue_commit_result(%(queue)s, %(key)s, %(kind)s, %(token)s::text, %(result)s::jsonb)

-- name: commit_result_batch
-- results: one JSON array, element i the result of message i (in the array's order).
SELECT queue_commit_result_batch(
         %(queue)s, %(keys)b::text[], %(kinds)b::text[], %(tokens)b::text[],
         ARRAY(SELECT r.value
                 FROM jsonb_array_elements(%(results)s::jsonb) WITH ORDINALITY AS r(value, i)
                ORDER BY r.i))

-- name: set_progress
SELECT queue_set_progress(%(queue)s, %(key)s, %(kind)s, %(token)s::text, %(progress)s::jsonb)

-- name: renew
SELECT token::text, cancel_requested
  FROM queue_renew(%(queue)s, %(key)s, %(kind)s, %(token)s::text, %(timeout)s::interval)

-- name: cancel_held
SELECT queue_cancel_held(%(queue)s, %(key)s, %(kind)s, %(token)s::text)


-- ==== dependencies ====
-- A message that waits for its parents (other messages, in any queues that keep results), and the
-- parents' results its consumer reads.

-- name: push_after
-- parents: the JSON array of {"queue", "p_key", "p_kind"}, in the order the child reads them back.
SELECT queue_push_after(%(queue)s, %(key)s, %(kind)s, %(payload)s::jsonb, %(parents)s::jsonb)

-- name: push_after_on
-- push_after with run_on: 'success', 'failure' (a failure callback) or 'always'.
SELECT queue_push_after_on(%(queue)s, %(key)s, %(kind)s, %(payload)s::jsonb, %(parents)s::jsonb, %(run_on)s)

-- name: push_after_with_headers
-- push_after with run_at, priority or headers (any of them given).
SELECT queue_push_after_on_with_headers(%(queue)s, %(key)s, %(kind)s, %(payload)s::jsonb, %(parents)s::jsonb,
                                        %(run_on)s, %(run_at)s::timestamptz, %(priority)s::integer,
                                        %(headers)s::jsonb)

-- name: push_after_batch
-- many push_after in one call (a JSON array of messages).
SELECT queue_push_after_batch(%(queue)s, %(messages)s::jsonb)

-- name: parent_results
SELECT ordinal, queue, p_key, p_kind, state, result
  FROM queue_parent_results(%(queue)s, %(key)s, %(kind)s)


-- ==== limits ====
-- Concurrency limits.
-- Rate limits: at most n deliveries of a kind (NULL: of the whole queue) in any window of length per.

-- name: set_limit
SELECT queue_set_limit(%(queue)s, %(kind)s, %(capacity)s::integer)

-- name: limits
SELECT queue, p_kind, capacity, in_use FROM queue_limits(%(queue)s)

-- name: set_rate
SELECT queue_set_rate(%(queue)s, %(kind)s::text, %(n)s::integer, %(per)s::interval)

-- name: rates
SELECT queue, p_kind, n, per, next_free_at, in_window FROM queue_rates(%(queue)s)


-- ==== workers ====
-- The worker registry.

-- name: worker_register
SELECT worker_id, secret
  FROM queue_worker_register(%(name)s, %(host)s, %(pid)s::integer, %(queues)b::text[])

-- name: worker_heartbeat
SELECT queue_worker_heartbeat(%(worker_id)s::bigint, %(secret)s::uuid)

-- name: worker_deregister
SELECT queue_worker_deregister(%(worker_id)s::bigint, %(secret)s::uuid)

-- name: release_dead_workers
SELECT queue_release_dead_workers(%(older_than)s::interval)

-- name: workers
SELECT worker_id, worker_name, host, pid, queues, started_at, heartbeat_at, heartbeat_age_s, reserve_as
  FROM queue_workers()


-- ==== schedules ====
-- Recurring messages.

-- name: schedule_every
SELECT queue_schedule_every(%(queue)s, %(key)s, %(kind)s, %(payload)s::jsonb, %(every)s::interval)

-- name: schedule_cron
SELECT queue_schedule_cron(%(queue)s, %(key)s, %(kind)s, %(payload)s::jsonb, %(cron)s)

-- name: unschedule
SELECT queue_unschedule(%(queue)s, %(key)s, %(kind)s)

-- name: schedules
SELECT queue, p_key, p_kind, payload, every_s, cron, next_at FROM queue_schedules(%(queue)s)


-- ==== ingest ====
-- Bulk enqueue through queue_ingest.

-- name: ingest_flush
SELECT enqueued, duplicates, rejected FROM queue_ingest_flush(%(queue)s)


-- ==== privileges ====
-- Least privilege: what pyqueue_sql.privileges (`pyqueue-sql grant`) runs.
-- {placeholders} are filled in as quoted identifiers (psycopg.sql.Identifier);
-- {action} and {privilege} come from fixed lists in pyqueue_sql/privileges.py.

-- name: current_schema
SELECT current_schema()

-- name: grant_schema_usage
GRANT USAGE ON SCHEMA {schema} TO {role}

-- name: grant_execute
GRANT EXECUTE ON FUNCTION {routine} TO {role}

-- name: revoke_execute
REVOKE EXECUTE ON FUNCTION {routine} FROM {role}

-- name: grant_table
GRANT {privilege} ON TABLE {table} TO {role}

-- name: revoke_table
REVOKE {privilege} ON TABLE {table} FROM {role}
