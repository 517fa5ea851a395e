-- pyqueue-sql revision 0007_lean_live_table (mysql): the routines this revision added or
-- changed (and DROPs of those it removed), frozen from sql/mysql/routines.sql by
-- `make release-routines`. Released: never edit it. The routines at a revision are the
-- union of the routine files up to it, later ones overriding earlier ones
-- (pyqueue_sql.routine_sets); a downgrade re-creates the previous ones from them.

