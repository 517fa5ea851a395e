-- pyqueue-sql revision 0003_ready_order (MySQL/MariaDB): the reserve order in a column of its own.
--
-- Why: pyqueue_message_ready_idx (queue_name, priority, scheduled_at, id) holds scheduled_at, which a claim
-- (reserve) sets to its lease's end: every claim moved the message's entry, and a committed lease left a
-- delete-marked entry at its lease end that an open read view (a consistent-snapshot dump, a long report)
-- keeps from purge, for every later reserve reading up to "now" to step over. ready_at is when the message became
-- (or becomes) due, leases aside: its place in reserve order, which a claim never writes, so a claim leaves the
-- message's place in the new ready index pyqueue_message_order_idx as it is. scheduled_at keeps every meaning it
-- has (due time, lease end, the group/dependency sentinel); a row is eligible exactly when scheduled_at <= now.
--
-- Run by `pyqueue-sql migrate` while the previous release's producers and workers go on, statement by statement
-- (each recorded: an interrupted run resumes at the statement it had not finished):
-- 1. ADD COLUMN, instant (MariaDB 10.6+, MySQL 8.0.12+: a catalog change under the table's metadata lock, for
--    milliseconds whatever the table's size). Its default, the earliest DATETIME a TIMESTAMP also holds, means
--    "ready since ever": a row written by a routine of the previous release, which does not know the column,
--    comes first in reserve order rather than never.
ALTER TABLE pyqueue_message
    ADD COLUMN ready_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:01',
    ALGORITHM = INSTANT;

-- 2. The backfill, ready_at = scheduled_at for the rows at the default, before the index exists (so each row's
--    change touches the clustered index only): in batches of 5,000 rows in id order, each committed on its own,
--    so a batch's row locks last milliseconds (a reserve skips a locked row, SKIP LOCKED; a settle of one waits
--    for its batch). Only rows still at the default are written, so running it again (a resumed migrate) redoes
--    nothing done. A batch that loses a deadlock or a lock wait is run again (20 times at most). Rows pushed
--    after it began (ids past the largest it saw) keep the default.
DROP PROCEDURE IF EXISTS pyqueue__backfill_ready_at;

DELIMITER //
CREATE PROCEDURE pyqueue__backfill_ready_at()
    SQL SECURITY INVOKER
    MODIFIES SQL DATA
BEGIN
    DECLARE v_last, v_to, v_max BIGINT;
    DECLARE v_failed, v_tries INT DEFAULT 0;
    DECLARE CONTINUE HANDLER FOR 1213, 1205 SET v_failed = 1;
    SET v_max = (SELECT MAX(id) FROM pyqueue_message);
    SET v_last = (SELECT MIN(id) FROM pyqueue_message) - 1;
    WHILE v_last < v_max DO
        SET v_to = LEAST(v_max, COALESCE(
            (SELECT id FROM pyqueue_message WHERE id > v_last ORDER BY id LIMIT 1 OFFSET 4999), v_max));
        SET v_failed = 0;
        UPDATE pyqueue_message SET ready_at = scheduled_at
         WHERE id > v_last AND id <= v_to AND ready_at = '1970-01-01 00:00:01';
        IF v_failed = 0 THEN
            COMMIT;
            SET v_last = v_to, v_tries = 0;
        ELSE
            ROLLBACK;
            SET v_tries = v_tries + 1;
            IF v_tries >= 20 THEN
                SIGNAL SQLSTATE '45000'
                   SET MESSAGE_TEXT = 'pyqueue:backfill: ready_at: 20 deadlocks or lock waits in a row; run migrate again';
            END IF;
        END IF;
    END WHILE;
END //
DELIMITER ;

CALL pyqueue__backfill_ready_at();

DROP PROCEDURE pyqueue__backfill_ready_at;

-- 3. The new ready index, built online: ALGORITHM=INPLACE, LOCK=NONE lets pushes, reserves and settles go on while
--    it is built (they wait only for the metadata lock it takes for milliseconds at its start and its end, which
--    itself waits for the transactions open on the table: a long one delays it, and the calls that come meanwhile
--    queue behind it). The reserve reads the range ready_at <= now of each (queue_name, priority) in (ready_at, id)
--    order, checking scheduled_at <= now on each entry: a leased row lies in the range, excluded by its lease end,
--    which the index carries last so that the check needs no visit of the row (10,000 leases in flight: a reserve of
--    one and its commit 2.7 ms with it, 11.3 ms without). A claim rewrites the entry where it is (only its last
--    part changes), so what a committed message leaves behind lies where it was pushed, before the live ones.
ALTER TABLE pyqueue_message
    ADD INDEX pyqueue_message_order_idx (queue_name, priority, ready_at, id, scheduled_at),
    ALGORITHM = INPLACE, LOCK = NONE;

-- pyqueue-sql migrate: the statements below run after the routines
-- 4. The old ready index goes once this version's routines are installed: the previous release's routines read it
--    (FORCE INDEX) until they are replaced. Dropping an index changes the catalog only. A fresh install runs this
--    file whole, before the routines.
ALTER TABLE pyqueue_message
    DROP INDEX pyqueue_message_ready_idx,
    ALGORITHM = INPLACE, LOCK = NONE;

-- 5. The rows the previous release's routines pushed while migrate ran (after the backfill began, before this
--    version's routines replaced theirs) are still at the default, first in reserve order: set as the backfill sets
--    them. No routine writes the default any more, and those rows lie at the start of their (queue, priority) range
--    of the new index, so it reads them there (the pairs by the index's prefix, a loose scan), not the table; 5,000
--    rows a statement, each committed on its own.
DROP PROCEDURE IF EXISTS pyqueue__backfill_ready_at_rest;

DELIMITER //
CREATE PROCEDURE pyqueue__backfill_ready_at_rest()
    SQL SECURITY INVOKER
    MODIFIES SQL DATA
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_priority INT;
    DECLARE v_end, v_failed, v_tries INT DEFAULT 0;
    DECLARE v_rows BIGINT;
    DECLARE c_pairs CURSOR FOR SELECT DISTINCT queue_name, priority FROM pyqueue_message;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_end = 1;
    DECLARE CONTINUE HANDLER FOR 1213, 1205 SET v_failed = 1;
    OPEN c_pairs;
    pairs: LOOP
        FETCH c_pairs INTO v_queue, v_priority;
        IF v_end = 1 THEN LEAVE pairs; END IF;
        SET v_rows = 1;
        WHILE v_rows > 0 DO
            SET v_failed = 0;
            UPDATE pyqueue_message FORCE INDEX (pyqueue_message_order_idx) SET ready_at = scheduled_at
             WHERE queue_name = v_queue AND priority = v_priority AND ready_at = '1970-01-01 00:00:01'
             LIMIT 5000;
            SET v_rows = ROW_COUNT();
            IF v_failed = 0 THEN
                COMMIT;
                SET v_tries = 0;
            ELSE
                ROLLBACK;
                SET v_rows = 1, v_tries = v_tries + 1;
                IF v_tries >= 20 THEN
                    SIGNAL SQLSTATE '45000'
                       SET MESSAGE_TEXT = 'pyqueue:backfill: ready_at: 20 deadlocks or lock waits in a row; run migrate again';
                END IF;
            END IF;
        END WHILE;
    END LOOP;
    CLOSE c_pairs;
END //
DELIMITER ;

CALL pyqueue__backfill_ready_at_rest();

DROP PROCEDURE pyqueue__backfill_ready_at_rest;
