-- Statements bench/spark_ingest.py runs (named blocks, loaded with pyqueue_sql.queries.parse_named).

-- name: plain_table_postgresql
-- The baseline: queue_ingest's columns, no index, no trigger, logged.
CREATE TABLE bench_plain (queue_name text, p_key text, p_kind text, payload text,
                          run_at timestamptz, priority numeric)

-- name: plain_table_mysql
CREATE TABLE bench_plain (queue_name LONGTEXT, p_key LONGTEXT, p_kind LONGTEXT, payload LONGTEXT,
                          run_at DATETIME(6), priority DECIMAL(65,30)) ENGINE=InnoDB

-- name: truncate_plain
TRUNCATE TABLE bench_plain

-- name: clear_queue
DELETE FROM pyqueue_message WHERE queue_name = 'bench.ingest'

-- name: load_only_postgresql
-- The "load" step: COPY into queue_ingest with its enqueue trigger off (the rows stay there).
ALTER TABLE queue_ingest DISABLE TRIGGER queue_ingest_enqueue

-- name: load_done_postgresql
ALTER TABLE queue_ingest ENABLE TRIGGER queue_ingest_enqueue

-- name: empty_ingest
DELETE FROM queue_ingest
