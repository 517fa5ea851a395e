-- pyqueue-sql revision 0005 (mysql): no table changes. Frozen once released.
-- The routines follow from sql/mysql/routines.sql (ROUTINES in the revision);
-- the migration's grant restore gives queue_messages and queue_throughput to
-- the accounts that may execute queue_stats.
DO 0;
