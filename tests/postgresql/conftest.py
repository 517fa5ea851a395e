"""What PostgreSQL's routines do inside, beyond the contract every dialect keeps (tests/contract):
the fast checks, the priorities' buffers, pyqueue_ready_from, redrive's skipped keys. Each file
carries ``only_dialect("postgresql")``; the tests run through both clients, as the contract's do
(tests/clients.py)."""

from __future__ import annotations

from tests.clients import client, connect, loop_thread  # noqa: F401 - the fixtures of this folder
