-- pyqueue-sql revision 0004 (mysql), down: undoes what 0004 added (only what exists);
-- 0003_hardening.routines.sql then restores 0003's routines.

SET @pyqueue_saved_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = 'STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';

-- Procedures new in 0004 (0003's routines re-create every other one).
DROP PROCEDURE IF EXISTS queue_throughput;
DROP PROCEDURE IF EXISTS queue_messages;
DROP PROCEDURE IF EXISTS pyqueue__upgrade_0004;
DROP PROCEDURE IF EXISTS pyqueue__downgrade_0004;
DROP PROCEDURE IF EXISTS queue_fail;
DROP PROCEDURE IF EXISTS queue_reset_setting;
DROP PROCEDURE IF EXISTS queue_settings;
DROP PROCEDURE IF EXISTS queue_message;
DROP PROCEDURE IF EXISTS queue_message_history;
DROP PROCEDURE IF EXISTS pyqueue__random_token;
DROP PROCEDURE IF EXISTS pyqueue__give_back;
DROP PROCEDURE IF EXISTS pyqueue__own_transaction;
DROP PROCEDURE IF EXISTS pyqueue__limit_compact;

DROP TABLE IF EXISTS pyqueue_ingest_lock;

-- 0003's view (it reads none of the columns dropped below).
CREATE OR REPLACE SQL SECURITY INVOKER VIEW pyqueue_dead_letters AS
SELECT m.queue_name             AS dead_letter_queue,
       (SELECT CASE WHEN COUNT(*) = 1 THEN MIN(s.queue_name) END
          FROM pyqueue_queue s
         WHERE s.dead_letter_queue = m.queue_name) AS from_queue,
       m.p_key                  AS p_key,
       m.p_kind                 AS p_kind,
       m.payload                AS payload,
       m.priority               AS priority,
       m.attempts               AS attempts,
       m.created_at             AS created_at,
       m.scheduled_at_initially AS dead_lettered_at,
       (m.reserve_token IS NOT NULL AND m.scheduled_at > UTC_TIMESTAMP(6)) AS reserved
  FROM pyqueue_message m
 WHERE m.queue_name IN (SELECT q.dead_letter_queue FROM pyqueue_queue q
                         WHERE q.dead_letter_queue IS NOT NULL);

DELIMITER //

CREATE PROCEDURE pyqueue__downgrade_0004()
SQL SECURITY INVOKER
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.COLUMNS
                WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'pyqueue_message'
                  AND COLUMN_NAME = 'dead_attempts') THEN
        ALTER TABLE pyqueue_message DROP COLUMN dead_attempts;
    END IF;
    IF EXISTS (SELECT 1 FROM information_schema.COLUMNS
                WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'pyqueue_message'
                  AND COLUMN_NAME = 'dead_from') THEN
        ALTER TABLE pyqueue_message DROP COLUMN dead_from;
    END IF;
    IF EXISTS (SELECT 1 FROM information_schema.COLUMNS
                WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'pyqueue_message'
                  AND COLUMN_NAME = 'last_error') THEN
        ALTER TABLE pyqueue_message DROP COLUMN last_error;
    END IF;
    IF EXISTS (SELECT 1 FROM information_schema.COLUMNS
                WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'pyqueue_history'
                  AND COLUMN_NAME = 'last_error') THEN
        ALTER TABLE pyqueue_history DROP COLUMN last_error;
    END IF;
    IF EXISTS (SELECT 1 FROM information_schema.COLUMNS
                WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'pyqueue_worker'
                  AND COLUMN_NAME = 'secret') THEN
        ALTER TABLE pyqueue_worker DROP COLUMN secret;
    END IF;
END //

DELIMITER ;

CALL pyqueue__downgrade_0004();
DROP PROCEDURE pyqueue__downgrade_0004;

SET SESSION sql_mode = @pyqueue_saved_sql_mode;
