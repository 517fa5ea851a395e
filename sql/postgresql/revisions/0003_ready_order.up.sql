-- pyqueue-sql revision 0003_ready_order (PostgreSQL): no table change
SELECT 1;
