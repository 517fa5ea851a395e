"""The contract suite: what holds on every dialect, each test run on PostgreSQL and MySQL/MariaDB and
through both clients, sync and asyncio (tests/clients.py says how). What one dialect's routines do
inside (their locks, plans, short ways, charset) is tested in tests/postgresql and tests/mysql."""

from __future__ import annotations

from tests.clients import client, connect, loop_thread  # noqa: F401 - the fixtures of this folder

from .lock_sessions import sessions  # noqa: F401 - the lock and token tests' connections
