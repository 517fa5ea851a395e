-- pyqueue-sql revision 0005 (mysql), down: drops the procedures 0005 added.

DROP PROCEDURE IF EXISTS queue_throughput;
DROP PROCEDURE IF EXISTS queue_messages;
