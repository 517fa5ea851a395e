"""Integrations with frameworks: pyqueue_sql.contrib.django."""
