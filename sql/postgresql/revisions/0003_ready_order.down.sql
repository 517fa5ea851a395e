-- pyqueue-sql revision 0003_ready_order down (PostgreSQL): no table change
SELECT 1;
