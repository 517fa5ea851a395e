"""A live web dashboard for operators (``pyqueue-sql dashboard``; the ``dashboard`` extra).

    from pyqueue_sql.dashboard import create_app
    app = create_app("postgresql://monitor@db/app", read_only=True)   # any ASGI server

See docs/dashboard.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from .app import DashboardApp, create_app

__all__ = ["DashboardApp", "create_app", "serve"]


def serve(
    dsn: str,
    host: str = "127.0.0.1",
    port: int = 8080,
    read_only: bool = False,
    token: str | None = None,
    log_level: str = "warning",
    allowed_hosts: Sequence[str] = (),
) -> None:
    """Runs the dashboard with uvicorn until interrupted. It refuses (InvalidArgumentError) to
    listen on an address other than a loopback one without a token, and answers only to the Host
    names of create_app (localhost, 127.0.0.1, [::1] and host, on port; allowed_hosts)."""
    import uvicorn

    from .. import errors
    from .app import exposed_without_token

    refusal = exposed_without_token(host, token)
    if refusal is not None:
        raise errors.InvalidArgumentError(refusal)
    app = create_app(
        dsn, read_only=read_only, token=token, allowed_hosts=allowed_hosts, listen_host=host, port=port
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level)
