"""A queue's and a database's calls, one module per SQL topic (sql/README.md lists the topics),
written sans-IO (pyqueue_sql.sansio) and composed into pyqueue_sql.client's QueueCalls and
DatabaseCalls; base.py holds what the groups share."""
