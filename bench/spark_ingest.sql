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
