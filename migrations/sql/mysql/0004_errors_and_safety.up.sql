-- pyqueue-sql revision 0004 (mysql): the DDL delta from 0003. Frozen once released.
-- The routines follow from 0004_errors_and_safety.routines.sql.
--
-- Each change is made only when it is not there yet (a temporary procedure
-- reads information_schema; MySQL 8.0 has no ADD COLUMN IF NOT EXISTS), so an
-- interrupted upgrade can be run again.

SET @pyqueue_saved_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = 'STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';

DELIMITER //

DROP PROCEDURE IF EXISTS pyqueue__upgrade_0004 //
CREATE PROCEDURE pyqueue__upgrade_0004()
SQL SECURITY INVOKER
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.COLUMNS
                    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'pyqueue_message'
                      AND COLUMN_NAME = 'last_error') THEN
        ALTER TABLE pyqueue_message
            ADD COLUMN last_error    VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
            ADD COLUMN dead_from     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
            ADD COLUMN dead_attempts INT NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.COLUMNS
                    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'pyqueue_history'
                      AND COLUMN_NAME = 'last_error') THEN
        ALTER TABLE pyqueue_history
            ADD COLUMN last_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.COLUMNS
                    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'pyqueue_worker'
                      AND COLUMN_NAME = 'secret') THEN
        ALTER TABLE pyqueue_worker
            ADD COLUMN secret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;
    END IF;
    -- Existing registrations get a random secret of their own (nobody knows
    -- it: such a worker's heartbeat answers false and it registers again).
    UPDATE pyqueue_worker
       SET secret = INSERT(INSERT(INSERT(INSERT(
                        MD5(CONCAT(UUID(), RAND(), worker_id, SYSDATE(6))), 9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-')
     WHERE secret IS NULL;
    ALTER TABLE pyqueue_worker
        MODIFY COLUMN secret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
END //

DELIMITER ;

CREATE TABLE IF NOT EXISTS pyqueue_ingest_lock (
    scope VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    PRIMARY KEY (scope)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: lock rows of queue_ingest_flush (one per queue, and one for all)';

CALL pyqueue__upgrade_0004();
DROP PROCEDURE pyqueue__upgrade_0004;

-- The dead-letter copy remembers its origin and its deliveries there.
CREATE OR REPLACE SQL SECURITY INVOKER VIEW pyqueue_dead_letters AS
SELECT m.queue_name             AS dead_letter_queue,
       m.dead_from              AS from_queue,
       m.p_key                  AS p_key,
       m.p_kind                 AS p_kind,
       m.payload                AS payload,
       m.priority               AS priority,
       m.dead_attempts          AS attempts,
       m.created_at             AS created_at,
       m.scheduled_at_initially AS dead_lettered_at,
       (m.reserve_token IS NOT NULL AND m.scheduled_at > UTC_TIMESTAMP(6)) AS reserved,
       m.last_error             AS last_error
  FROM pyqueue_message m
 WHERE m.queue_name IN (SELECT q.dead_letter_queue FROM pyqueue_queue q
                         WHERE q.dead_letter_queue IS NOT NULL);

SET SESSION sql_mode = @pyqueue_saved_sql_mode;
