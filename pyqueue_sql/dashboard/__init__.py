"""A live web dashboard for operators (``pyqueue-sql dashboard``; the ``dashboard`` extra).

    from pyqueue_sql.dashboard import create_app
    app = create_app("postgresql://monitor@db/app", read_only=True)   # any ASGI server

See docs/dashboard.md.
"""

from __future__ import annotations

from .app import DashboardApp, create_app

__all__ = ["DashboardApp", "create_app", "serve"]


def serve(
    dsn: str,
    host: str = "127.0.0.1",
    port: int = 8080,
    read_only: bool = False,
    token: str | None = None,
    log_level: str = "warning",
) -> None:
    """Runs the dashboard with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(create_app(dsn, read_only=read_only, token=token), host=host, port=port, log_level=log_level)
