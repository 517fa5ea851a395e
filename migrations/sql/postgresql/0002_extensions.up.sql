-- pyqueue-sql revision 0002 (postgresql): the DDL delta from 0001. Frozen once released.
-- The routines follow from 0002_extensions.routines.sql.

-- ---- issue 3: wakeups (NOTIFY throttle) ----

-- ---- end of issue 3 ----


-- ---- issue 6: fast paths ----

-- ---- end of issue 6 ----


-- ---- issue 5: queue_ingest ----

-- The bulk-ingest surface for plain JDBC writers (Spark's df.write.jdbc): an
-- INSERT of rows (queue_name, p_key, p_kind, payload, run_at, priority) makes
-- every row a live message, with dedup, in the same statement. A statement-
-- level trigger (routines.sql, pyqueue__ingest) validates the statement's rows,
-- moves them into pyqueue_message with one INSERT ... ON CONFLICT DO NOTHING
-- and deletes them here: the table is empty whenever no INSERT is running.
-- Columns are loosely typed (text, numeric) so that every bad value reaches
-- the trigger's checks and gets a pyqueue:<code> error instead of a cast
-- error, and so that a writer's varchar parameters need no stringtype option.
-- UNLOGGED: rows live for one statement; a crash can lose only rows whose
-- transaction never committed. ingest_id orders the rows (FIFO) and lets the
-- trigger delete exactly its own rows through the index.
CREATE UNLOGGED TABLE queue_ingest (
    queue_name text        NULL,
    p_key      text        NULL,
    p_kind     text        NULL,
    payload    text        NULL,
    run_at     timestamptz NULL,
    priority   numeric     NULL,
    ingest_id  bigint      GENERATED ALWAYS AS IDENTITY
);

COMMENT ON TABLE queue_ingest IS
    'pyqueue-sql: INSERT rows (queue_name, p_key, p_kind, payload, run_at, priority) to enqueue them with dedup; always empty after the INSERT.';

CREATE INDEX queue_ingest_id_idx ON queue_ingest (ingest_id);

-- ---- end of issue 5 ----


-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- ---- end of issue 4 ----


