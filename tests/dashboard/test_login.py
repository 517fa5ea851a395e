"""The dashboard's login page (with a token) tells nothing about the database before the token
is shown: not its user, host or name, nor which database server it is."""

from __future__ import annotations

import re
import urllib.parse

from .conftest import http


def test_the_login_page_shows_nothing_of_the_database_until_logged_in(serve, dsn, dialect, queue):
    parts = urllib.parse.urlsplit(dsn)
    database = parts.path.lstrip("/")
    user = parts.username or ("postgres" if dialect == "postgresql" else "root")
    served = serve(dsn, token="login-page-token")
    for status_wanted, page in (
        (200, http(served.url + "/login")),
        (401, None),  # a wrong token: the form again
    ):
        if page is None:
            _, _, headers = http(served.url + "/login")
            csrf = re.search(r"pyqueue_csrf=([^;]+)", headers["set-cookie"]).group(1)
            page = http(
                served.url + "/login",
                data={"token": "wrong", "csrf": csrf, "next": "/"},
                headers={"Cookie": f"pyqueue_csrf={csrf}"},
            )
        status, body, _ = page
        assert status == status_wanted
        assert "Access token" in body
        assert database not in body
        assert f"{user}@" not in body and parts.hostname not in body
        assert dialect not in body
    # logged in, the header says which database it is
    status, body, _ = http(served.url + "/", headers={"Authorization": "Bearer login-page-token"})
    assert status == 200 and database in body and queue.name in body


def test_without_a_token_the_header_names_the_database(serve, dsn, dialect):
    status, body, _ = http(serve(dsn).url + "/")
    assert status == 200 and urllib.parse.urlsplit(dsn).path.lstrip("/") in body and dialect in body
