"""The groups topic's calls: a FIFO group's limit (sql/<dialect>/routines/07_groups.sql). Written sans-
IO (pyqueue_sql.sansio); pyqueue_sql.client's QueueCalls and DatabaseCalls are composed of these
groups."""

from __future__ import annotations

from .. import statements
from ..dialects import text_value
from ..rows import MAX_GROUP_LIMIT
from ..sansio import sans_io, statement_call
from .base import QueueCallsBase, whole_number_within


class GroupsCalls(QueueCallsBase):
    """A queue's calls of the groups topic (see QueueCalls)."""

    @sans_io
    def set_group_limit(self, group: str | None, k: int | None) -> None:
        """Up to k messages of a FIFO group live at once (reserved, or ready at the group's
        head), started in the group's order; group None = the queue's default for every group
        (a named group's own k overrides it). k None removes it (back to the default; the
        queue's default back to 1, one at a time). k from 1 to 10000."""
        yield statement_call(
            statements.SET_GROUP_LIMIT,
            queue=self.name,
            group=text_value(group, "group"),
            k=whole_number_within(k, "k", 1, MAX_GROUP_LIMIT),
        )
