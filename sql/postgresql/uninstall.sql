-- pyqueue-sql: removes everything schema.sql and routines/ install (PostgreSQL).
-- Messages are lost.
--
-- Sections by topic, in the reverse order of schema.sql and routines/:
-- each drops its routines, then its views and tables (a view or trigger
-- before what it uses). The helpers come after every topic that calls them,
-- and the queue and message tables last: pyqueue__dead_letter and
-- pyqueue__archive take their row types as argument types, so PostgreSQL
-- refuses to drop the tables before those functions.

-- ==== privileges ====
-- Nothing to drop: the grants go with the routines.

-- ==== revisions after 0.1.0 (sql/postgresql/revisions/, newest first) ====
-- 0002_installed
DROP TABLE IF EXISTS pyqueue_installed;

-- ==== ingest ====
DROP FUNCTION IF EXISTS queue_ingest_flush(text);
DROP TABLE IF EXISTS queue_ingest;                   -- and its trigger queue_ingest_enqueue
DROP TABLE IF EXISTS pyqueue_ingest_tally;

-- ==== schedules ====
DROP FUNCTION IF EXISTS queue_schedules(text);
DROP FUNCTION IF EXISTS queue_unschedule(text, text, text);
DROP FUNCTION IF EXISTS queue_schedule_cron(text, text, text, jsonb, text);
DROP FUNCTION IF EXISTS queue_schedule_every(text, text, text, jsonb, interval);
DROP TABLE IF EXISTS pyqueue_schedule;

-- ==== workers ====
DROP FUNCTION IF EXISTS queue_workers();
DROP FUNCTION IF EXISTS queue_release_dead_workers(interval);
DROP FUNCTION IF EXISTS queue_worker_deregister(bigint, uuid);
DROP FUNCTION IF EXISTS queue_worker_heartbeat(bigint, uuid);
DROP FUNCTION IF EXISTS queue_worker_register(text, text, integer, text[]);
DROP TABLE IF EXISTS pyqueue_worker;

-- ==== limits ====
DROP FUNCTION IF EXISTS queue_set_group_limit(text, text, integer);
DROP FUNCTION IF EXISTS queue_rates(text);
DROP FUNCTION IF EXISTS queue_set_rate(text, text, integer, interval);
DROP FUNCTION IF EXISTS queue_limits(text);
DROP FUNCTION IF EXISTS queue_set_limit(text, text, integer);
DROP TABLE IF EXISTS pyqueue_rate_slot;
DROP TABLE IF EXISTS pyqueue_rate;
DROP TABLE IF EXISTS pyqueue_limit_slot;
DROP TABLE IF EXISTS pyqueue_limit;

-- ==== dependencies ====
DROP FUNCTION IF EXISTS queue_parent_results(text, text, text);
DROP FUNCTION IF EXISTS queue_push_after(text, text, text, jsonb, jsonb);
DROP FUNCTION IF EXISTS queue_push_after_on(text, text, text, jsonb, jsonb, text);
DROP FUNCTION IF EXISTS queue_push_after_on_with_headers(text, text, text, jsonb, jsonb, text, timestamptz, integer, jsonb);
DROP FUNCTION IF EXISTS queue_push_after_batch(text, jsonb);
DROP FUNCTION IF EXISTS pyqueue__push_after(text, text, text, jsonb, jsonb, text, timestamptz, integer, jsonb);
DROP TABLE IF EXISTS pyqueue_dependency;

-- ==== results ====
DROP FUNCTION IF EXISTS queue_set_progress(text, text, text, uuid, jsonb);
DROP FUNCTION IF EXISTS queue_set_progress(text, text, text, text, jsonb);
DROP FUNCTION IF EXISTS queue_cancel_held(text, text, text, uuid);
DROP FUNCTION IF EXISTS queue_cancel_held(text, text, text, text);
DROP FUNCTION IF EXISTS queue_renew(text, text, text, uuid, interval);
DROP FUNCTION IF EXISTS queue_renew(text, text, text, text, interval);
DROP FUNCTION IF EXISTS queue_cancel(text, text, text);
DROP FUNCTION IF EXISTS queue_result_channel(text);
DROP FUNCTION IF EXISTS queue_result_wait(text, text, text, interval);
DROP FUNCTION IF EXISTS queue_results(text, text, text, integer, timestamptz);
DROP FUNCTION IF EXISTS queue_purge_results(text, text, timestamptz, integer);
DROP FUNCTION IF EXISTS pyqueue__check_results_filter(text, integer, integer, timestamptz);
DROP FUNCTION IF EXISTS queue_result(text, text, text);
DROP FUNCTION IF EXISTS queue_commit_result_batch(text, text[], text[], text[], jsonb[]);
DROP FUNCTION IF EXISTS queue_commit_result(text, text, text, uuid, jsonb);
DROP FUNCTION IF EXISTS queue_commit_result(text, text, text, text, jsonb);
DROP FUNCTION IF EXISTS queue_set_result_retention(text, interval);
DROP TABLE IF EXISTS pyqueue_result;

-- ==== history and dead letters ====
DROP FUNCTION IF EXISTS queue_throughput(text, timestamptz);
DROP FUNCTION IF EXISTS queue_horizon();
DROP FUNCTION IF EXISTS queue_groups(text, integer);
DROP FUNCTION IF EXISTS queue_messages(text, text, text, text, text, integer);
DROP FUNCTION IF EXISTS queue_message_history(text, text, text);
DROP FUNCTION IF EXISTS queue_message(text, text, text);
DROP FUNCTION IF EXISTS queue_dead_letters(text);
DROP FUNCTION IF EXISTS queue_redrive(text, text, integer);
DROP FUNCTION IF EXISTS queue_replay(text, timestamptz, timestamptz);
DROP FUNCTION IF EXISTS queue_purge_history(text, integer);
DROP VIEW IF EXISTS pyqueue_dead_letters;
DROP TABLE IF EXISTS pyqueue_history;

-- ==== topics ====
DROP FUNCTION IF EXISTS queue_publish_batch_with_headers(text[], text[], text[], jsonb[], timestamptz[], integer[], jsonb[]);
DROP FUNCTION IF EXISTS queue_publish_batch(text[], text[], text[], jsonb[], timestamptz[], integer[]);
DROP FUNCTION IF EXISTS queue_publish_with_headers(text, text, text, jsonb, timestamptz, integer, jsonb);
DROP FUNCTION IF EXISTS queue_publish(text, text, text, jsonb, timestamptz, integer);
DROP FUNCTION IF EXISTS pyqueue__publish_batch(text[], text[], text[], jsonb[], timestamptz[], integer[], jsonb[]);
DROP FUNCTION IF EXISTS pyqueue__publish(text, text, text, jsonb, timestamptz, integer, jsonb);
DROP FUNCTION IF EXISTS queue_bindings(text);
DROP FUNCTION IF EXISTS queue_unbind(text, text);
DROP FUNCTION IF EXISTS queue_bind(text, text);
DROP TABLE IF EXISTS pyqueue_binding;

-- ==== fast paths ====
DROP FUNCTION IF EXISTS queue_commit_batch(text, text[], text[], text[]);
DROP FUNCTION IF EXISTS queue_commit_batch(text, text[], text[], anycompatible);  -- installs of earlier versions
DROP FUNCTION IF EXISTS pyqueue__commit_held(pyqueue_queue, text[], text[], uuid[]);
DROP FUNCTION IF EXISTS pyqueue__delete_held(text, text[], text[], uuid[]);
DROP FUNCTION IF EXISTS queue_commit_reserve(text, text, text, uuid, text, interval, integer, text[]);
DROP FUNCTION IF EXISTS queue_commit_reserve(text, text, text, text, text, interval, integer, text[]);
DROP FUNCTION IF EXISTS queue_commit_reserve(text, text, text, anycompatible, text, interval, integer, text[]);  -- installs of earlier versions

-- ==== wakeups ====
DROP FUNCTION IF EXISTS queue_wait(text, text[], interval, interval);
DROP FUNCTION IF EXISTS queue_next_scheduled_at(text, text[]);
DROP FUNCTION IF EXISTS queue_set_notify_window(text, interval);
DROP FUNCTION IF EXISTS queue_channel(text);
DROP TABLE IF EXISTS pyqueue_notify;

-- ==== consume ====
DROP FUNCTION IF EXISTS queue_release(text, text);
DROP FUNCTION IF EXISTS queue_remove(text, text, text);
DROP FUNCTION IF EXISTS queue_move(text, text, text, uuid, text, jsonb);
DROP FUNCTION IF EXISTS queue_move(text, text, text, text, text, jsonb);
DROP FUNCTION IF EXISTS queue_move(text, text, text, anycompatible, text, jsonb);  -- installs of earlier versions
DROP FUNCTION IF EXISTS queue_extend(text, text, text, uuid, interval);
DROP FUNCTION IF EXISTS queue_extend(text, text, text, text, interval);
DROP FUNCTION IF EXISTS queue_extend(text, text, text, anycompatible, interval);  -- installs of earlier versions
DROP FUNCTION IF EXISTS queue_give_up(text, text, text, uuid, text);
DROP FUNCTION IF EXISTS queue_give_up(text, text, text, text, text);
DROP FUNCTION IF EXISTS queue_snooze(text, text, text, uuid, interval);
DROP FUNCTION IF EXISTS queue_snooze(text, text, text, text, interval);
DROP FUNCTION IF EXISTS queue_fail(text, text, text, uuid, interval, text);
DROP FUNCTION IF EXISTS queue_fail(text, text, text, text, interval, text);
DROP FUNCTION IF EXISTS queue_fail(text, text, text, anycompatible, interval, text);  -- installs of earlier versions
DROP FUNCTION IF EXISTS queue_rollback(text, text, text, uuid, interval);
DROP FUNCTION IF EXISTS queue_rollback(text, text, text, text, interval);
DROP FUNCTION IF EXISTS queue_rollback(text, text, text, anycompatible, interval);  -- installs of earlier versions
DROP FUNCTION IF EXISTS queue_commit(text, text, text, uuid);
DROP FUNCTION IF EXISTS queue_commit(text, text, text, text);
DROP FUNCTION IF EXISTS queue_commit(text, text, text, anycompatible);  -- installs of earlier versions
DROP FUNCTION IF EXISTS queue_reserve(text, text, interval, integer, text[]);
DROP FUNCTION IF EXISTS queue_pop(text, integer);

-- ==== produce ====
DROP FUNCTION IF EXISTS queue_push_batch_grouped_with_headers(text, text[], text[], text[], jsonb[], timestamptz[], integer[], jsonb[]);
DROP FUNCTION IF EXISTS queue_push_batch_grouped(text, text[], text[], text[], jsonb[], timestamptz[], integer[]);
DROP FUNCTION IF EXISTS queue_push_grouped_with_headers(text, text, text, text, jsonb, timestamptz, integer, jsonb);
DROP FUNCTION IF EXISTS queue_push_grouped(text, text, text, text, jsonb, timestamptz, integer);
DROP FUNCTION IF EXISTS queue_push_replace(text, text, text, jsonb, timestamptz, integer);
DROP FUNCTION IF EXISTS queue_push_batch_with_headers(text, text[], text[], jsonb[], timestamptz[], integer[], jsonb[]);
DROP FUNCTION IF EXISTS queue_push_batch(text, text[], text[], jsonb[], timestamptz[], integer[]);
DROP FUNCTION IF EXISTS queue_push_with_headers(text, text, text, jsonb, timestamptz, integer, jsonb);
DROP FUNCTION IF EXISTS queue_push(text, text, text, jsonb, timestamptz, integer);
DROP FUNCTION IF EXISTS pyqueue__push_batch_grouped(text, text[], text[], text[], jsonb[], timestamptz[], integer[], jsonb[]);
DROP FUNCTION IF EXISTS pyqueue__push_grouped(text, text, text, text, jsonb, timestamptz, integer, jsonb);
DROP FUNCTION IF EXISTS pyqueue__push_batch(text, text[], text[], jsonb[], timestamptz[], integer[], jsonb[]);
DROP FUNCTION IF EXISTS pyqueue__batch_rows(text, text[], text[], text[], jsonb[], timestamptz[], integer[], jsonb[], timestamptz, boolean);
DROP FUNCTION IF EXISTS pyqueue__begin_push_batch(text, text, text[], text[], text[], jsonb[], timestamptz[], integer[], jsonb[], timestamptz);
DROP FUNCTION IF EXISTS pyqueue__push(text, text, text, jsonb, timestamptz, integer, jsonb);

-- ==== queues ====
-- (the tables pyqueue_message and pyqueue_queue go last, see the top)
DROP FUNCTION IF EXISTS queue_kind_stats(text);
DROP FUNCTION IF EXISTS queue_stats(text);
DROP FUNCTION IF EXISTS queue_resume(text);
DROP FUNCTION IF EXISTS queue_pause(text);
DROP FUNCTION IF EXISTS queue_drop(text);
DROP FUNCTION IF EXISTS queue_set_max_payload(text, integer);
DROP FUNCTION IF EXISTS queue_set_max_reservation(text, interval);
DROP FUNCTION IF EXISTS queue_settings(text);
DROP FUNCTION IF EXISTS queue_reset_setting(text, text);
DROP FUNCTION IF EXISTS queue_create(text, interval, integer, text, interval);

-- ==== helpers ====
DROP FUNCTION IF EXISTS pyqueue__topic_regex(text);
DROP FUNCTION IF EXISTS pyqueue__check_topic(text, text, boolean);
DROP FUNCTION IF EXISTS pyqueue__groups_settle(text, text[], timestamptz);
DROP FUNCTION IF EXISTS pyqueue__group_settle_k(text, text, timestamptz, boolean, integer);
DROP FUNCTION IF EXISTS pyqueue__group_settle(text, text, timestamptz, boolean);
DROP FUNCTION IF EXISTS pyqueue__group_first_blocked(text, text);
DROP FUNCTION IF EXISTS pyqueue__group_head(text, text, text, timestamptz, timestamptz, boolean);
DROP FUNCTION IF EXISTS pyqueue__blocked_at();
DROP FUNCTION IF EXISTS pyqueue__ingest();
DROP FUNCTION IF EXISTS pyqueue__schedule(text, text, text, jsonb, bigint, text);
DROP FUNCTION IF EXISTS pyqueue__schedule_next(text, text, text);
DROP FUNCTION IF EXISTS pyqueue__push_occurrence(text, text, text, jsonb, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__schedule_after(bigint, text, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__schedule_key(text, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__cron_next(text, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__cron_field(text, text, integer, integer);
DROP FUNCTION IF EXISTS pyqueue__check_worker(bigint, uuid);
DROP FUNCTION IF EXISTS pyqueue__limit_renew(text, text, text, uuid);
DROP FUNCTION IF EXISTS pyqueue__limited_tids(text, timestamptz, integer, text[], timestamptz, bigint, integer);
DROP FUNCTION IF EXISTS pyqueue__limit_free_slots(text, text, timestamptz, integer);
DROP FUNCTION IF EXISTS pyqueue__rate_slot(text, text, interval, timestamptz);  -- installs of earlier versions
DROP FUNCTION IF EXISTS pyqueue__limit_claim(text, text, bigint, text, integer, timestamptz, bigint[]);
DROP FUNCTION IF EXISTS pyqueue__slot_held(text, text, text, bigint, integer, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__refuse_result(integer, integer);
DROP FUNCTION IF EXISTS pyqueue__check_results(pyqueue_queue);
DROP FUNCTION IF EXISTS pyqueue__json_value(jsonb);
DROP FUNCTION IF EXISTS pyqueue__deps_left(text, text, text, boolean, text);
DROP FUNCTION IF EXISTS pyqueue__deps_moved(text, text, text, text, bigint);
DROP FUNCTION IF EXISTS pyqueue__results_lock(text, boolean);
DROP FUNCTION IF EXISTS pyqueue__deps_read_committed();
DROP FUNCTION IF EXISTS pyqueue__finish_held(pyqueue_queue, text, text, uuid, text, text, jsonb);
DROP FUNCTION IF EXISTS pyqueue__finish(pyqueue_queue, pyqueue_message, text, text, jsonb, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__record_result(pyqueue_queue, pyqueue_message, text, jsonb, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__result_notify(text, text, text, text);
DROP FUNCTION IF EXISTS pyqueue__result_channel(text);
DROP FUNCTION IF EXISTS pyqueue__archive(pyqueue_queue, pyqueue_message, text, text, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__notify(text);
DROP FUNCTION IF EXISTS pyqueue__notify_key(text, bigint);
DROP FUNCTION IF EXISTS pyqueue__channel(text);
DROP FUNCTION IF EXISTS pyqueue__extend(text, text, text, text, interval);
DROP FUNCTION IF EXISTS pyqueue__give_back(text, text, text, text, interval, text, text);
DROP FUNCTION IF EXISTS pyqueue__dead_letter(pyqueue_queue, text, text, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__reserve(pyqueue_queue, text, interval, integer, text[]);
DROP FUNCTION IF EXISTS pyqueue__expire(pyqueue_queue, tid);
DROP FUNCTION IF EXISTS pyqueue__expired(jsonb, text, text);
DROP FUNCTION IF EXISTS pyqueue__clock_text(timestamptz);
DROP FUNCTION IF EXISTS pyqueue__due_tids(text, timestamptz, integer, text[], integer, timestamptz, bigint);
DROP FUNCTION IF EXISTS pyqueue__ready_tids(text, timestamptz, integer, text[], boolean, boolean);
DROP FUNCTION IF EXISTS pyqueue__ready_tids(text, timestamptz, integer, text[], boolean);
DROP FUNCTION IF EXISTS pyqueue__ready_from_advance(text, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__ready_from_held(xid8);
DROP FUNCTION IF EXISTS pyqueue__ready_from_lower(text, timestamptz, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__check_reserve(text, interval, integer, text[]);
DROP FUNCTION IF EXISTS pyqueue__check_kinds(text[]);
DROP FUNCTION IF EXISTS pyqueue__refuse_reservation(interval);
DROP FUNCTION IF EXISTS pyqueue__check_batch_headers(jsonb[], integer);
DROP FUNCTION IF EXISTS pyqueue__check_headers(jsonb);
DROP FUNCTION IF EXISTS pyqueue__check_expires(jsonb, text);
DROP FUNCTION IF EXISTS pyqueue__check_run_at(timestamptz, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__check_message(text, text, jsonb, integer);
DROP FUNCTION IF EXISTS pyqueue__check_payloads(jsonb[], integer);
DROP FUNCTION IF EXISTS pyqueue__refuse_payload(integer, integer);
DROP FUNCTION IF EXISTS pyqueue__refuse_occurrence_key();
DROP FUNCTION IF EXISTS pyqueue__occurrence_key(text);
DROP FUNCTION IF EXISTS pyqueue__bad_name(text, integer);
DROP FUNCTION IF EXISTS pyqueue__check_batch(text, text[], boolean, text[], text[], jsonb[], timestamptz[], integer[], timestamptz);
DROP FUNCTION IF EXISTS pyqueue__check_batch_size(integer);
DROP FUNCTION IF EXISTS pyqueue__check_duration(text, interval, boolean);
DROP FUNCTION IF EXISTS pyqueue__negative_part(interval);
DROP FUNCTION IF EXISTS pyqueue__queue(text, boolean);
DROP FUNCTION IF EXISTS pyqueue__check_reservation(text, text, text);
DROP FUNCTION IF EXISTS pyqueue__check_name(text, text, integer);

-- the tables of the queues topic, last
DROP TABLE IF EXISTS pyqueue_group_limit;
DROP TABLE IF EXISTS pyqueue_group;
DROP TABLE IF EXISTS pyqueue_ready_lower;
DROP TABLE IF EXISTS pyqueue_ready_from;
DROP TABLE IF EXISTS pyqueue_message;
DROP TABLE IF EXISTS pyqueue_queue;
