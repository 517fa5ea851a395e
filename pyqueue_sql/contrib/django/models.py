"""The app's one model: no table of its own (unmanaged, never queried), it stands for the queue's
messages in Django's admin, so that the admin lists them and Django's permissions apply to them
(``pyqueue_sql.view_queuemessage`` to browse, ``change_queuemessage`` to cancel and redrive,
``delete_queuemessage`` to remove). The pages read and act through the contract's routines, on
the backend's ADMIN_DSN (admin.py)."""

from django.db import models


class QueueMessage(models.Model):
    class Meta:
        managed = False
        db_table = "pyqueue_admin_placeholder"  # never read: the admin's pages call routines
        verbose_name = "queue message"
        verbose_name_plural = "queue messages and results"
        default_permissions = ("view", "change", "delete")
