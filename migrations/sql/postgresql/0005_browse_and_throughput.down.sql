-- pyqueue-sql revision 0005 (postgresql), down: drops the routines 0005 added.

DROP FUNCTION IF EXISTS queue_throughput(text, timestamptz);
DROP FUNCTION IF EXISTS queue_messages(text, text, text, text, text, integer);
