-- Named statements the Python client runs (pyqueue_sql/queries.py loads them).
-- Each calls one contract procedure; parameters use %(name)s. Durations are
-- seconds, times are UTC DATETIME(6) values.
-- Sections by topic, in the order of the files of routines/ (../README.md lists the topics).


-- ==== queues ====
-- The queues: create, change, read back, drop, pause, resume, count.

-- name: create
CALL queue_create(%(queue)s, %(visibility_timeout)s, %(max_attempts)s, %(dead_letter_queue)s,
                  %(history_retention)s)

-- name: reset_setting
CALL queue_reset_setting(%(queue)s, %(setting)s)

-- name: settings
CALL queue_settings(%(queue)s)

-- name: set_max_reservation
CALL queue_set_max_reservation(%(queue)s, %(max_reservation)s)

-- name: set_max_payload
CALL queue_set_max_payload(%(queue)s, %(max_payload)s)

-- name: drop
CALL queue_drop(%(queue)s)

-- name: pause
CALL queue_pause(%(queue)s)

-- name: resume
CALL queue_resume(%(queue)s)

-- name: stats
CALL queue_stats(%(queue)s)

-- name: kind_stats
CALL queue_kind_stats(%(queue)s)


-- ==== produce ====
-- Putting messages in.

-- name: push
CALL queue_push(%(queue)s, %(key)s, %(kind)s, %(payload)s, %(run_at)s, %(priority)s)

-- name: push_with_headers
-- push with headers (JSON text of an object): the sibling procedure, so that a push without them
-- costs nothing more.
CALL queue_push_with_headers(%(queue)s, %(key)s, %(kind)s, %(payload)s, %(run_at)s, %(priority)s, %(headers)s)

-- name: push_batch
CALL queue_push_batch(%(queue)s, %(messages)s, NULL, NULL, NULL, NULL)

-- name: push_batch_with_headers
-- messages: push_batch's JSON array, each object with a "headers" member (null = none).
CALL queue_push_batch_with_headers(%(queue)s, %(messages)s, NULL, NULL, NULL, NULL, NULL)

-- name: push_replace
CALL queue_push_replace(%(queue)s, %(key)s, %(kind)s, %(payload)s, %(run_at)s, %(priority)s)

-- name: push_grouped
-- One row: pushed (1 = new, 0 = a duplicate).
CALL queue_push_grouped(%(queue)s, %(group)s, %(key)s, %(kind)s, %(payload)s, %(run_at)s, %(priority)s)

-- name: push_grouped_with_headers
CALL queue_push_grouped_with_headers(%(queue)s, %(group)s, %(key)s, %(kind)s, %(payload)s, %(run_at)s,
                                     %(priority)s, %(headers)s)

-- name: push_batch_grouped
-- messages: push_batch's JSON array, each object with a "group" member (null = no group).
-- One row: pushed (how many were new).
CALL queue_push_batch_grouped(%(queue)s, %(messages)s, NULL, NULL, NULL, NULL, NULL)

-- name: push_batch_grouped_with_headers
CALL queue_push_batch_grouped_with_headers(%(queue)s, %(messages)s, NULL, NULL, NULL, NULL, NULL, NULL)


-- ==== reserve ====
-- Taking messages out: reserve (a token for every later step) or pop.

-- name: pop
CALL queue_pop(%(queue)s, %(n)s)

-- name: reserve
CALL queue_reserve(%(queue)s, %(worker)s, %(timeout)s, %(n)s, %(kinds)s)


-- ==== settle ====
-- Finishing a reserved message: commit, roll back, fail, give up, snooze, extend, move; remove, release.

-- name: commit
CALL queue_commit(%(queue)s, %(key)s, %(kind)s, %(token)s)

-- name: rollback
CALL queue_rollback(%(queue)s, %(key)s, %(kind)s, %(token)s, %(delay)s)

-- name: fail
-- One row, one column: 'retry', 'dead_lettered', 'dropped', or NULL.
CALL queue_fail(%(queue)s, %(key)s, %(kind)s, %(token)s, %(delay)s, %(error)s)

-- name: give_up
-- One row, one column: outcome ('dead_lettered', 'dropped', or NULL).
CALL queue_give_up(%(queue)s, %(key)s, %(kind)s, %(token)s, %(error)s)

-- name: snooze
-- One row, one column: snoozed (1, or 0 when the token no longer holds).
CALL queue_snooze(%(queue)s, %(key)s, %(kind)s, %(token)s, %(delay)s)

-- name: release
-- One row, one column: released (how many reservations were handed back).
CALL queue_release(%(queue)s, %(worker)s)

-- name: extend
CALL queue_extend(%(queue)s, %(key)s, %(kind)s, %(token)s, %(timeout)s)

-- name: move
CALL queue_move(%(queue)s, %(key)s, %(kind)s, %(token)s, %(to_queue)s, %(payload)s)

-- name: remove
CALL queue_remove(%(queue)s, %(key)s, %(kind)s)


-- ==== groups ====
-- FIFO groups: how many of a group's messages may be live at once.

-- name: set_group_limit
CALL queue_set_group_limit(%(queue)s, %(group)s, %(k)s)


-- ==== wakeups ====
-- Waiting for work without polling hard.

-- name: channel
CALL queue_channel(%(queue)s)

-- name: set_notify_window
CALL queue_set_notify_window(%(queue)s, %(window)s)

-- name: next_scheduled_at
CALL queue_next_scheduled_at(%(queue)s, %(kinds)s)

-- name: wait
CALL queue_wait(%(queue)s, %(kinds)s, %(timeout)s, %(poll)s)


-- Coming due without the wait: the time machine of the test helpers (pyqueue_sql.timetravel).
-- Every stored time of the messages (their expiries too), outcomes, history and rate windows moved
-- %(seconds)s into the past, as if that much time had passed. A blocked or waiting message's scheduled_at (the sentinel) is no time: kept.
-- A schedule's next_at is kept too (its pending occurrence's key names it): the occurrence's
-- message moves, and its commit schedules the next one after the real now.

-- name: testing_advance_messages
UPDATE pyqueue_message
   SET scheduled_at = CASE WHEN scheduled_at = CAST('9999-12-31 23:59:59.999999' AS DATETIME(6)) THEN scheduled_at
                           ELSE scheduled_at - INTERVAL %(seconds)s SECOND END,
       ready_at = CASE WHEN ready_at = CAST('9999-12-31 23:59:59.999999' AS DATETIME(6)) THEN ready_at
                       ELSE ready_at - INTERVAL %(seconds)s SECOND END,
       scheduled_at_initially = scheduled_at_initially - INTERVAL %(seconds)s SECOND,
       created_at = created_at - INTERVAL %(seconds)s SECOND,
       cancel_requested_at = cancel_requested_at - INTERVAL %(seconds)s SECOND,
       -- an expiry (the header pyqueue.expires_at, a UTC time of one format) moves with the clock
       headers = IF(JSON_TYPE(JSON_EXTRACT(headers, '$."pyqueue.expires_at"')) = 'STRING',
                    JSON_SET(headers, '$."pyqueue.expires_at"',
                             DATE_FORMAT(STR_TO_DATE(LEFT(JSON_UNQUOTE(JSON_EXTRACT(headers, '$."pyqueue.expires_at"')), 26),
                                                     '%%Y-%%m-%%dT%%H:%%i:%%s.%%f') - INTERVAL %(seconds)s SECOND,
                                         '%%Y-%%m-%%dT%%H:%%i:%%s.%%fZ')),
                    headers)

-- name: testing_advance_results
UPDATE pyqueue_result SET finished_at = finished_at - INTERVAL %(seconds)s SECOND

-- name: testing_advance_history
UPDATE pyqueue_history
   SET created_at = created_at - INTERVAL %(seconds)s SECOND,
       processed_at = processed_at - INTERVAL %(seconds)s SECOND

-- name: testing_advance_rates
UPDATE pyqueue_rate_slot SET used_at = used_at - INTERVAL %(seconds)s SECOND WHERE used_at IS NOT NULL

-- name: testing_advance_ready_from
-- nothing to start over: MySQL's reserve reads its index from the start
DO 0

-- name: testing_clock_database
-- which database the test clock moves (its offset is kept per database)
SELECT DATABASE() AS name

-- name: testing_settle_occurrences
-- the test clock: the pending occurrence of a schedule is due at its time (its key's, the schedule's
-- next_at) less how far the clock moved since the schedule was made; the one a commit has just
-- pushed is due at its key's time, as if no time had passed
UPDATE pyqueue_message m
  JOIN pyqueue_schedule s
    ON m.queue_name = s.queue_name AND m.p_kind = s.p_kind
   AND m.p_key = CONCAT(s.p_key, '@', DATE_FORMAT(s.next_at, '%%Y-%%m-%%dT%%H:%%i:%%sZ'))
   SET m.scheduled_at = s.next_at - INTERVAL %(seconds)s SECOND,
       m.ready_at = s.next_at - INTERVAL %(seconds)s SECOND,
       m.scheduled_at_initially = s.next_at - INTERVAL %(seconds)s SECOND
 WHERE s.queue_name = %(queue)s AND s.p_key = %(key)s AND s.p_kind = %(kind)s
   AND m.reserve_token IS NULL AND m.scheduled_at = m.scheduled_at_initially


-- ==== fast paths ====
-- Two steps of the consume cycle in one call.

-- name: commit_reserve
-- Two result sets: the reserved rows, then one row (committed).
CALL queue_commit_reserve(%(queue)s, %(key)s, %(kind)s, %(token)s, %(worker)s, %(timeout)s, %(n)s,
                          %(kinds)s)

-- name: commit_batch
CALL queue_commit_batch(%(queue)s, %(keys)s, %(kinds)s, %(tokens)s)


-- ==== topics ====
-- Publishing to the queues bound to a topic pattern, and the bindings.

-- name: publish
-- One row: queues (how many queues got a new message).
CALL queue_publish(%(topic)s, %(key)s, %(kind)s, %(payload)s, %(run_at)s, %(priority)s)

-- name: publish_with_headers
CALL queue_publish_with_headers(%(topic)s, %(key)s, %(kind)s, %(payload)s, %(run_at)s, %(priority)s, %(headers)s)

-- name: publish_batch
-- messages: push_batch's JSON array, each object with a "topic" member.
-- One row: pushed (how many new messages, over all queues).
CALL queue_publish_batch(%(messages)s, NULL, NULL, NULL, NULL, NULL)

-- name: publish_batch_with_headers
CALL queue_publish_batch_with_headers(%(messages)s, NULL, NULL, NULL, NULL, NULL, NULL)

-- name: bind
CALL queue_bind(%(pattern)s, %(queue)s)

-- name: unbind
CALL queue_unbind(%(pattern)s, %(queue)s)

-- name: bindings
CALL queue_bindings(%(queue)s)


-- ==== history and dead letters ====
-- History, dead letters, and one message's state and history.

-- name: purge_history
CALL queue_purge_history(%(queue)s, %(n)s)

-- name: replay
CALL queue_replay(%(queue)s, %(start)s, %(end)s)

-- name: redrive
CALL queue_redrive(%(queue)s, %(to_queue)s, %(n)s)

-- name: dead_letters
CALL queue_dead_letters(%(queue)s)

-- name: message
CALL queue_message(%(queue)s, %(key)s, %(kind)s)

-- name: message_history
CALL queue_message_history(%(queue)s, %(key)s, %(kind)s)


-- ==== browse ====
-- Reads for browsing a queue and its traffic.

-- name: messages
CALL queue_messages(%(queue)s, %(state)s, %(key_prefix)s, %(after_key)s, %(after_kind)s, %(n)s)

-- name: throughput
CALL queue_throughput(%(queue)s, %(since)s)

-- name: groups
CALL queue_groups(%(queue)s, %(n)s)

-- name: horizon
CALL queue_horizon()


-- ==== results ====
-- A finished message's result, waiting for it, cancelling, and what its consumer reports.

-- name: set_result_retention
CALL queue_set_result_retention(%(queue)s, %(retention)s)

-- name: result
CALL queue_result(%(queue)s, %(key)s, %(kind)s)

-- name: results
-- newest first, a page of n (NULL: 100); before: NULL or a UTC DATETIME (the next page: the last row's finished_at)
CALL queue_results(%(queue)s, %(kind)s, %(state)s, %(n)s, %(before)s)

-- name: purge_results
CALL queue_purge_results(%(queue)s, %(state)s, %(before)s, %(n)s)

-- name: result_wait
CALL queue_result_wait(%(queue)s, %(key)s, %(kind)s, %(timeout)s)

-- name: result_channel
CALL queue_result_channel(%(queue)s)

-- name: cancel
CALL queue_cancel(%(queue)s, %(key)s, %(kind)s)

-- name: commit_result
CALL queue_commit_result(%(queue)s, %(key)s, %(kind)s, %(token)s, %(result)s)

-- name: commit_result_batch
-- results: one JSON array, element i the result of message i.
CALL queue_commit_result_batch(%(queue)s, %(keys)s, %(kinds)s, %(tokens)s, %(results)s)

-- name: set_progress
CALL queue_set_progress(%(queue)s, %(key)s, %(kind)s, %(token)s, %(progress)s)

-- name: renew
CALL queue_renew(%(queue)s, %(key)s, %(kind)s, %(token)s, %(timeout)s)

-- name: cancel_held
CALL queue_cancel_held(%(queue)s, %(key)s, %(kind)s, %(token)s)


-- ==== dependencies ====
-- A message that waits for its parents (other messages, in any queues that keep results), and the
-- parents' results its consumer reads.

-- name: push_after
-- parents: the JSON text of an array of {"queue", "p_key", "p_kind"}, in the order the child reads them back.
CALL queue_push_after(%(queue)s, %(key)s, %(kind)s, %(payload)s, %(parents)s)

-- name: push_after_on
-- push_after with run_on: 'success', 'failure' (a failure callback) or 'always'.
CALL queue_push_after_on(%(queue)s, %(key)s, %(kind)s, %(payload)s, %(parents)s, %(run_on)s)

-- name: push_after_with_headers
-- push_after with run_at, priority or headers (any of them given).
CALL queue_push_after_on_with_headers(%(queue)s, %(key)s, %(kind)s, %(payload)s, %(parents)s, %(run_on)s, %(run_at)s,
                                      %(priority)s, %(headers)s)

-- name: push_after_batch
-- many push_after in one call (a JSON array of messages).
CALL queue_push_after_batch(%(queue)s, %(messages)s)

-- name: parent_results
CALL queue_parent_results(%(queue)s, %(key)s, %(kind)s)


-- ==== limits ====
-- Concurrency limits.
-- Rate limits: at most n deliveries of a kind (NULL: of the whole queue) in any window of per_s seconds.

-- name: set_limit
CALL queue_set_limit(%(queue)s, %(kind)s, %(capacity)s)

-- name: limits
CALL queue_limits(%(queue)s)

-- name: set_rate
CALL queue_set_rate(%(queue)s, %(kind)s, %(n)s, %(per)s)

-- name: rates
CALL queue_rates(%(queue)s)


-- ==== workers ====
-- The worker registry.

-- name: worker_register
CALL queue_worker_register(%(name)s, %(host)s, %(pid)s, %(queues)s)

-- name: worker_heartbeat
CALL queue_worker_heartbeat(%(worker_id)s, %(secret)s)

-- name: worker_deregister
CALL queue_worker_deregister(%(worker_id)s, %(secret)s)

-- name: release_dead_workers
CALL queue_release_dead_workers(%(older_than)s)

-- name: workers
CALL queue_workers()


-- ==== schedules ====
-- Recurring messages.

-- name: schedule_every
CALL queue_schedule_every(%(queue)s, %(key)s, %(kind)s, %(payload)s, %(every)s)

-- name: schedule_cron
CALL queue_schedule_cron(%(queue)s, %(key)s, %(kind)s, %(payload)s, %(cron)s)

-- name: unschedule
CALL queue_unschedule(%(queue)s, %(key)s, %(kind)s)

-- name: schedules
CALL queue_schedules(%(queue)s)


-- ==== ingest ====
-- Bulk enqueue through queue_ingest.

-- name: ingest_flush
CALL queue_ingest_flush(%(queue)s)

-- name: ingest_reject_mark
-- The newest reject so far; ingest_rejects then lists what came after it.
SELECT COALESCE(MAX(id), 0) FROM pyqueue_ingest_reject

-- name: ingest_rejects
SELECT reason, COUNT(*) AS messages FROM pyqueue_ingest_reject
 WHERE id > %(mark)s AND (%(queue)s IS NULL OR queue_name = %(queue)s)
 GROUP BY reason ORDER BY COUNT(*) DESC, reason LIMIT 5


-- ==== privileges ====
-- Least privilege: what pyqueue_sql.privileges (`pyqueue-sql grant`) runs.
-- {placeholders} are filled in as backtick-quoted identifiers of validated
-- names (an account as `user`@`host`); {privilege} comes from a fixed list in
-- pyqueue_sql/privileges.py.

-- name: current_schema
SELECT DATABASE()

-- The accounts and roles (GRANTEE, 'user'@'host') that may create temporary tables in this database, on it (a
-- database-level grant, its name possibly a pattern) or globally. Such an account must not call the routines: a
-- temporary table named as one of ours (pyqueue_queue, pyqueue_message, ...) shadows the real table inside the SQL
-- SECURITY DEFINER procedures (MariaDB and MySQL resolve a temporary table first, even under a name qualified by the
-- database), so it could reserve from a paused queue or change max_attempts and the dead-letter queue it sees.
-- `pyqueue-sql grant` refuses such an account. Read from the grant tables themselves (the installing account reads
-- the mysql database), which list roles and MariaDB's PUBLIC ('PUBLIC'@'', whose privileges every account has)
-- as well as accounts: information_schema.USER_PRIVILEGES leaves out MariaDB's roles and PUBLIC. Database names
-- are compared without regard to case (a wider match refuses more, never less).
-- The second column is where the privilege was granted: the database name (or pattern) it was granted on, or '*' for
-- *.* (what a REVOKE must name).
-- name: temporary_table_grantees
SELECT CONCAT('''', d.User, '''@''', d.Host, '''') AS grantee, d.Db AS scope
  FROM mysql.db d
 WHERE d.Create_tmp_table_priv = 'Y' AND LOWER(DATABASE()) LIKE LOWER(d.Db)
UNION
SELECT CONCAT('''', u.User, '''@''', u.Host, ''''), '*'
  FROM mysql.user u
 WHERE u.Create_tmp_table_priv = 'Y'
 ORDER BY 1, 2

-- The roles granted to an account or a role (user, host; a MariaDB role has host ''), for `pyqueue-sql grant` to find
-- a role that gives it CREATE TEMPORARY TABLES (MariaDB: mysql.roles_mapping; MySQL 8: mysql.role_edges).
-- name: account_roles
SELECT r.Role AS role_name, '' AS role_host FROM mysql.roles_mapping r WHERE r.User = %s AND r.Host = %s

-- name: account_roles_mysql8
SELECT e.FROM_USER AS role_name, e.FROM_HOST AS role_host FROM mysql.role_edges e WHERE e.TO_USER = %s AND e.TO_HOST = %s

-- name: grant_execute
GRANT EXECUTE ON PROCEDURE {routine} TO {role}

-- name: revoke_execute
REVOKE EXECUTE ON PROCEDURE {routine} FROM {role}

-- name: grant_table
GRANT {privilege} ON TABLE {table} TO {role}

-- name: revoke_table
REVOKE {privilege} ON TABLE {table} FROM {role}

-- A GRANT must never create an account: MariaDB does so (password-less)
-- unless sql_mode has NO_AUTO_CREATE_USER; MySQL 8 never does and has no such
-- mode, so nothing is added there. (Run without parameters: '%' stays as is.)
-- name: session_sql_mode
SELECT @@SESSION.sql_mode

-- name: forbid_account_creation
SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''),
                                 IF(VERSION() LIKE '%MariaDB%', 'NO_AUTO_CREATE_USER', NULL))

-- name: set_session_sql_mode
SET SESSION sql_mode = %s

-- Spark's bulk enqueue (pyqueue_sql.spark, method="bulk"): one partition's CSV
-- lines into queue_ingest. {columns}: the backquoted queue_ingest columns the
-- lines carry, in their order (the caller allows only queue_ingest's own).
-- name: load_ingest_csv
LOAD DATA LOCAL INFILE %s INTO TABLE queue_ingest CHARACTER SET utf8mb4
FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '"' ESCAPED BY ''
LINES TERMINATED BY '\n' ({columns})

-- name: track_expired
-- a worker's connection: the OK packet of a call flags a change of default_week_format, which pyqueue__expire sets
-- (to its own value) when it ended an expired message (CLIENT_SESSION_TRACK; see MySQLDialect.take_expired)
SET SESSION session_track_system_variables = CONCAT_WS(',', NULLIF(@@session.session_track_system_variables, ''), 'default_week_format')

-- name: take_expired
-- the expiries pyqueue__expire noted in this session since the last read (a JSON array, or NULL), then none
SELECT @pyqueue_expired AS expired; SET @pyqueue_expired = NULL
