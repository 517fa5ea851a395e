-- pyqueue-sql: removes everything schema.sql and routines/ install
-- (MySQL 8.0+ / MariaDB 10.6+). Messages are lost.
--
-- Sections by topic, in the reverse order of schema.sql and routines/:
-- each drops its procedures, then its views and tables (a view before what
-- it reads, a table before the tables its foreign keys reference). The
-- helpers come after every topic that calls them, and the queue and message
-- tables last, as on PostgreSQL.

-- ==== privileges ====
-- Nothing to drop: DROP PROCEDURE removes the grants on a procedure.

-- ==== revisions after 0.1.0 (sql/mysql/revisions/, newest first) ====
-- 0003_ready_order: its backfill's procedures, left by a run stopped before it dropped them (the column and
-- the index go with the table)
DROP PROCEDURE IF EXISTS pyqueue__backfill_ready_at;
DROP PROCEDURE IF EXISTS pyqueue__backfill_ready_at_rest;
-- 0002_installed
DROP TABLE IF EXISTS pyqueue_installed;

-- ==== ingest ====
DROP PROCEDURE IF EXISTS queue_ingest_flush;
DROP PROCEDURE IF EXISTS pyqueue__ingest_dups;
DROP PROCEDURE IF EXISTS pyqueue__ingest_reject;
DROP TABLE IF EXISTS pyqueue_ingest_lock;
DROP TABLE IF EXISTS pyqueue_ingest_reject;
DROP TABLE IF EXISTS queue_ingest;

-- ==== schedules ====
DROP PROCEDURE IF EXISTS queue_schedules;
DROP PROCEDURE IF EXISTS queue_unschedule;
DROP PROCEDURE IF EXISTS queue_schedule_cron;
DROP PROCEDURE IF EXISTS queue_schedule_every;
DROP TABLE IF EXISTS pyqueue_schedule;

-- ==== workers ====
DROP PROCEDURE IF EXISTS queue_workers;
DROP PROCEDURE IF EXISTS queue_release_dead_workers;
DROP PROCEDURE IF EXISTS queue_worker_deregister;
DROP PROCEDURE IF EXISTS queue_worker_heartbeat;
DROP PROCEDURE IF EXISTS queue_worker_register;
DROP TABLE IF EXISTS pyqueue_worker;

-- ==== limits ====
DROP PROCEDURE IF EXISTS queue_rates;
DROP PROCEDURE IF EXISTS queue_set_rate;
DROP PROCEDURE IF EXISTS queue_limits;
DROP PROCEDURE IF EXISTS queue_set_limit;
DROP TABLE IF EXISTS pyqueue_rate_slot;
DROP TABLE IF EXISTS pyqueue_rate;
DROP TABLE IF EXISTS pyqueue_limit_slot;
DROP TABLE IF EXISTS pyqueue_limit;

-- ==== dependencies ====
DROP PROCEDURE IF EXISTS queue_parent_results;
DROP PROCEDURE IF EXISTS queue_push_after;
DROP PROCEDURE IF EXISTS queue_push_after_on;
DROP PROCEDURE IF EXISTS queue_push_after_on_with_headers;
DROP PROCEDURE IF EXISTS queue_push_after_batch;
DROP PROCEDURE IF EXISTS pyqueue__push_after;
DROP PROCEDURE IF EXISTS pyqueue__push_after_check;
DROP PROCEDURE IF EXISTS pyqueue__push_after_parents;
DROP PROCEDURE IF EXISTS pyqueue__push_after_rows;
DROP TABLE IF EXISTS pyqueue_dependency;

-- ==== results ====
DROP PROCEDURE IF EXISTS queue_result_channel;
DROP PROCEDURE IF EXISTS queue_result_wait;
DROP PROCEDURE IF EXISTS queue_results;
DROP PROCEDURE IF EXISTS queue_purge_results;
DROP PROCEDURE IF EXISTS pyqueue__check_results_filter;
DROP PROCEDURE IF EXISTS queue_result;
DROP TABLE IF EXISTS pyqueue_result;

-- ==== history and dead letters ====
DROP PROCEDURE IF EXISTS queue_throughput;
DROP PROCEDURE IF EXISTS queue_horizon;
DROP PROCEDURE IF EXISTS queue_set_group_limit;
DROP PROCEDURE IF EXISTS queue_groups;
DROP PROCEDURE IF EXISTS queue_messages;
DROP PROCEDURE IF EXISTS queue_message_history;
DROP PROCEDURE IF EXISTS queue_message;
DROP PROCEDURE IF EXISTS queue_dead_letters;
DROP PROCEDURE IF EXISTS queue_redrive;
DROP PROCEDURE IF EXISTS queue_replay;
DROP PROCEDURE IF EXISTS queue_purge_history;
DROP VIEW IF EXISTS pyqueue_dead_letters;
DROP TABLE IF EXISTS pyqueue_history;

-- ==== topics ====
DROP PROCEDURE IF EXISTS queue_publish_batch_with_headers;
DROP PROCEDURE IF EXISTS queue_publish_batch;
DROP PROCEDURE IF EXISTS queue_publish_with_headers;
DROP PROCEDURE IF EXISTS queue_publish;
DROP PROCEDURE IF EXISTS pyqueue__publish_batch;
DROP PROCEDURE IF EXISTS pyqueue__publish;
DROP PROCEDURE IF EXISTS queue_bindings;
DROP PROCEDURE IF EXISTS queue_unbind;
DROP PROCEDURE IF EXISTS queue_bind;
DROP PROCEDURE IF EXISTS pyqueue__bind;
DROP TABLE IF EXISTS pyqueue_binding;

-- ==== fast paths ====
DROP PROCEDURE IF EXISTS queue_commit_result_batch;
DROP PROCEDURE IF EXISTS queue_commit_batch;
DROP PROCEDURE IF EXISTS pyqueue__commit_batch;
DROP PROCEDURE IF EXISTS pyqueue__commit_batch_args;
DROP PROCEDURE IF EXISTS pyqueue__commit_batch_bad;
DROP PROCEDURE IF EXISTS pyqueue__commit_batch_results_args;
DROP PROCEDURE IF EXISTS pyqueue__commit_batch_plain;
DROP PROCEDURE IF EXISTS pyqueue__commit_batch_locate;
DROP PROCEDURE IF EXISTS pyqueue__commit_batch_held;
DROP PROCEDURE IF EXISTS queue_commit_reserve;
DROP PROCEDURE IF EXISTS pyqueue__commit_held;

-- ==== wakeups ====
DROP PROCEDURE IF EXISTS queue_wait;
DROP PROCEDURE IF EXISTS queue_next_scheduled_at;
DROP PROCEDURE IF EXISTS queue_set_notify_window;
DROP PROCEDURE IF EXISTS queue_channel;
DROP TABLE IF EXISTS pyqueue_notify;

-- ==== consume ====
DROP PROCEDURE IF EXISTS queue_set_progress;
DROP PROCEDURE IF EXISTS queue_cancel;
DROP PROCEDURE IF EXISTS queue_cancel_held;
DROP PROCEDURE IF EXISTS queue_commit_result;
DROP PROCEDURE IF EXISTS pyqueue__finish_held;
DROP PROCEDURE IF EXISTS queue_remove;
DROP PROCEDURE IF EXISTS queue_move;
DROP PROCEDURE IF EXISTS queue_renew;
DROP PROCEDURE IF EXISTS queue_extend;
DROP PROCEDURE IF EXISTS pyqueue__extend;
DROP PROCEDURE IF EXISTS queue_give_up;
DROP PROCEDURE IF EXISTS queue_fail;
DROP PROCEDURE IF EXISTS queue_release;
DROP PROCEDURE IF EXISTS queue_snooze;
DROP PROCEDURE IF EXISTS queue_rollback;
DROP PROCEDURE IF EXISTS queue_commit;
DROP PROCEDURE IF EXISTS queue_reserve;
DROP PROCEDURE IF EXISTS queue_pop;
DROP PROCEDURE IF EXISTS pyqueue__reserve_limited;
DROP PROCEDURE IF EXISTS pyqueue__reserve;
DROP PROCEDURE IF EXISTS pyqueue__pop_results;
DROP PROCEDURE IF EXISTS pyqueue__pop_unclaim_busy;

-- ==== produce ====
DROP PROCEDURE IF EXISTS queue_push_batch_grouped_with_headers;
DROP PROCEDURE IF EXISTS queue_push_batch_grouped;
DROP PROCEDURE IF EXISTS queue_push_grouped_with_headers;
DROP PROCEDURE IF EXISTS queue_push_grouped;
DROP PROCEDURE IF EXISTS queue_push_replace;
DROP PROCEDURE IF EXISTS queue_push_batch_with_headers;
DROP PROCEDURE IF EXISTS queue_push_batch;
DROP PROCEDURE IF EXISTS queue_push_with_headers;
DROP PROCEDURE IF EXISTS queue_push;
DROP PROCEDURE IF EXISTS pyqueue__push_batch_grouped;
DROP PROCEDURE IF EXISTS pyqueue__push_batch_heads;
DROP PROCEDURE IF EXISTS pyqueue__push_grouped;
DROP PROCEDURE IF EXISTS pyqueue__push_batch;
DROP PROCEDURE IF EXISTS pyqueue__raise_batch_shape;

-- ==== queues ====
-- (the tables pyqueue_group, pyqueue_message and pyqueue_queue go last, see
-- the top)
DROP PROCEDURE IF EXISTS queue_kind_stats;
DROP PROCEDURE IF EXISTS queue_stats;
DROP FUNCTION IF EXISTS pyqueue__stats_range;
DROP PROCEDURE IF EXISTS queue_resume;
DROP PROCEDURE IF EXISTS queue_pause;
DROP PROCEDURE IF EXISTS queue_drop;
DROP PROCEDURE IF EXISTS queue_set_result_retention;
DROP PROCEDURE IF EXISTS queue_set_max_payload;
DROP PROCEDURE IF EXISTS queue_set_max_reservation;
DROP PROCEDURE IF EXISTS queue_settings;
DROP PROCEDURE IF EXISTS queue_reset_setting;
DROP PROCEDURE IF EXISTS queue_create;

-- ==== helpers ====
DROP PROCEDURE IF EXISTS pyqueue__topic_regex;
DROP PROCEDURE IF EXISTS pyqueue__deps_left_many;
DROP PROCEDURE IF EXISTS pyqueue__deps_popped;
DROP PROCEDURE IF EXISTS pyqueue__deps_left;
DROP PROCEDURE IF EXISTS pyqueue__deps_level;
DROP PROCEDURE IF EXISTS pyqueue__deps_succeeded;
DROP PROCEDURE IF EXISTS pyqueue__deps_cancel;
DROP PROCEDURE IF EXISTS pyqueue__deps_ready;
DROP PROCEDURE IF EXISTS pyqueue__deps_moved_many;
DROP PROCEDURE IF EXISTS pyqueue__deps_moved;
DROP PROCEDURE IF EXISTS pyqueue__raise_undecided;
DROP PROCEDURE IF EXISTS pyqueue__check_topic;
DROP PROCEDURE IF EXISTS pyqueue__unclaim;
DROP PROCEDURE IF EXISTS pyqueue__groups_leave;
DROP PROCEDURE IF EXISTS pyqueue__groups_commit;
DROP PROCEDURE IF EXISTS pyqueue__groups_commit_settle;
DROP PROCEDURE IF EXISTS pyqueue__group_leave;
DROP PROCEDURE IF EXISTS pyqueue__group_extra_left;
DROP PROCEDURE IF EXISTS pyqueue__group_place;
DROP PROCEDURE IF EXISTS pyqueue__group_fill;
DROP PROCEDURE IF EXISTS pyqueue__group_fill_batch;
DROP PROCEDURE IF EXISTS pyqueue__group_next;
DROP PROCEDURE IF EXISTS pyqueue__group_lock;
DROP PROCEDURE IF EXISTS pyqueue__worker_secret;
DROP PROCEDURE IF EXISTS pyqueue__schedule;
DROP PROCEDURE IF EXISTS pyqueue__schedule_next;
DROP PROCEDURE IF EXISTS pyqueue__schedule_after;
DROP PROCEDURE IF EXISTS pyqueue__cron_next;
DROP PROCEDURE IF EXISTS pyqueue__cron_field;
DROP PROCEDURE IF EXISTS pyqueue__rate_free_at;
DROP PROCEDURE IF EXISTS pyqueue__rate_pick;
DROP PROCEDURE IF EXISTS pyqueue__limit_claim;
DROP PROCEDURE IF EXISTS pyqueue__limited_give_back;
DROP PROCEDURE IF EXISTS pyqueue__limited_admit;
DROP PROCEDURE IF EXISTS pyqueue__limited_candidate;
DROP PROCEDURE IF EXISTS pyqueue__claim_limited_batch;
DROP PROCEDURE IF EXISTS pyqueue__claim_limited_write;
DROP PROCEDURE IF EXISTS pyqueue__limited_allowance;
DROP PROCEDURE IF EXISTS pyqueue__result;
DROP PROCEDURE IF EXISTS pyqueue__check_result_size;
DROP PROCEDURE IF EXISTS pyqueue__check_result;
DROP PROCEDURE IF EXISTS pyqueue__result_put;
DROP PROCEDURE IF EXISTS pyqueue__limit_take;
DROP PROCEDURE IF EXISTS pyqueue__unarchive;
DROP PROCEDURE IF EXISTS pyqueue__archive;
DROP PROCEDURE IF EXISTS pyqueue__next_at;
DROP PROCEDURE IF EXISTS pyqueue__kinds;
DROP PROCEDURE IF EXISTS pyqueue__give_back_claims;
DROP PROCEDURE IF EXISTS pyqueue__claim_one;
DROP PROCEDURE IF EXISTS pyqueue__claim_short;
DROP PROCEDURE IF EXISTS pyqueue__claim_short_batch;
DROP PROCEDURE IF EXISTS pyqueue__claim;
DROP PROCEDURE IF EXISTS pyqueue__end_claim;
DROP PROCEDURE IF EXISTS pyqueue__expire;
DROP PROCEDURE IF EXISTS pyqueue__candidates;
DROP PROCEDURE IF EXISTS pyqueue__reserve_args;
DROP PROCEDURE IF EXISTS pyqueue__give_back;
DROP PROCEDURE IF EXISTS pyqueue__dead_letter;
DROP PROCEDURE IF EXISTS pyqueue__set_paused;
DROP PROCEDURE IF EXISTS pyqueue__check_message_key;
DROP PROCEDURE IF EXISTS pyqueue__check_queue;
DROP PROCEDURE IF EXISTS pyqueue__queue;
DROP PROCEDURE IF EXISTS pyqueue__random_token;
DROP PROCEDURE IF EXISTS pyqueue__begin_read_committed;
DROP PROCEDURE IF EXISTS pyqueue__own_transaction;
DROP PROCEDURE IF EXISTS pyqueue__check_reservation_cap;
DROP PROCEDURE IF EXISTS pyqueue__raise_size;
DROP PROCEDURE IF EXISTS pyqueue__check_size;
DROP PROCEDURE IF EXISTS pyqueue__check_message;
DROP PROCEDURE IF EXISTS pyqueue__check_key;
DROP PROCEDURE IF EXISTS pyqueue__check_headers;
DROP PROCEDURE IF EXISTS pyqueue__check_expires;
DROP PROCEDURE IF EXISTS pyqueue__check_payload;
DROP PROCEDURE IF EXISTS pyqueue__check_reservation;
DROP PROCEDURE IF EXISTS pyqueue__check_token;
DROP PROCEDURE IF EXISTS pyqueue__check_int;
DROP PROCEDURE IF EXISTS pyqueue__check_duration;
DROP PROCEDURE IF EXISTS pyqueue__check_utf8;
DROP PROCEDURE IF EXISTS pyqueue__check_batch_headers;
DROP PROCEDURE IF EXISTS pyqueue__check_batch_size;
DROP PROCEDURE IF EXISTS pyqueue__check_messages;
DROP FUNCTION IF EXISTS pyqueue__refuse_element;
DROP PROCEDURE IF EXISTS pyqueue__check_name;
DROP PROCEDURE IF EXISTS pyqueue__check_clock;
DROP PROCEDURE IF EXISTS pyqueue__raise;

-- the tables of the queues topic, last
DROP TABLE IF EXISTS pyqueue_group_limit;
DROP TABLE IF EXISTS pyqueue_group;
DROP TABLE IF EXISTS pyqueue_message;
DROP TABLE IF EXISTS pyqueue_queue;
