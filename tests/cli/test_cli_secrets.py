"""A database password given in any way a DSN or the environment takes it is never printed by the
command line: not in an error (stats, push, migrate, a DSN in the wrong place), not in the
dashboard's start line. Each form, on both dialects; the secret is checked in its written,
percent-decoded and percent-encoded forms."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
import uuid

import pytest

from pyqueue_sql import cli
from pyqueue_sql.display import dsn_secrets, redact, redact_dsn

from ..helpers import free_port

FORMS = ("userinfo", "bare-percent", "encoded", "query-first", "query-later", "query-upper")


def _secret() -> str:
    return "Sx" + uuid.uuid4().hex[:10]


def _dsn_with(dsn: str, form: str, secret: str, database: str | None = None) -> str:
    parts = urllib.parse.urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ("postgres" if parts.scheme.startswith("postgresql") else "root")
    path = parts.path if database is None else "/" + database
    netloc, query = f"{user}@{host}", parts.query
    if form == "userinfo":
        netloc = f"{user}:{secret}@{host}"
    elif form == "bare-percent":  # not valid percent-encoding: libpq refuses it, quoting it back
        netloc = f"{user}:{secret}%zz@{host}"
    elif form == "encoded":
        netloc = f"{user}:{urllib.parse.quote(secret + '@/?', safe='')}@{host}"
    elif form == "query-first":
        query = f"password={secret}"
    elif form == "query-later":
        query = f"connect_timeout=5&password={secret}"
    elif form == "query-upper":
        query = f"sslmode=prefer&PASSWORD={secret}&application_name=x"
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, query, ""))


def _assert_hidden(text: str, secret: str) -> None:
    for shown in (secret, urllib.parse.quote(secret, safe=""), secret + "%zz"):
        assert shown not in text, text


def _drive(capsys, argv):
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("verb", ["stats", "push", "migrate", "result", "cancel"])
def test_no_verb_prints_the_password(capsys, monkeypatch, dsn, form, verb):
    monkeypatch.delenv("PYQUEUE_DSN", raising=False)
    secret = _secret()
    for database in (None, f"no_such_db_{uuid.uuid4().hex[:6]}"):
        target = _dsn_with(dsn, form, secret, database)
        argv = {
            "stats": ["stats"],
            "push": ["push", "no-such-queue", "k", "x", "{}"],
            "migrate": ["migrate"],
            "result": ["result", "no-such-queue", "k", "x", "--wait", "1"],
            "cancel": ["cancel", "no-such-queue", "k", "x"],
        }[verb]
        for placed in (argv + ["--dsn", target], ["--dsn", target] + argv):
            code, out, err = _drive(capsys, placed)
            _assert_hidden(out + err, secret)
            if code != 0:
                assert len(err.strip().splitlines()) == 1, err


def test_password_variables_are_never_printed(capsys, monkeypatch, dsn):
    secret = _secret()
    monkeypatch.setenv("PGPASSWORD", secret)
    monkeypatch.setenv("MYSQL_PWD", secret)
    parts = urllib.parse.urlsplit(dsn)
    # an error that quotes the variable's value back (here: as a queue name)
    code, out, err = _drive(capsys, ["stats", secret, "--dsn", dsn])
    assert code == 1
    _assert_hidden(out + err, secret)
    target = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/no_such_db_x", "", ""))
    code, out, err = _drive(capsys, ["stats", "--dsn", target])
    _assert_hidden(out + err, secret)


def test_the_dashboard_start_line_masks_every_password(dsn, tmp_path):
    """One dashboard process per form of the DSN, started together (each imports the dashboard's
    web stack: one after the other they were most of this test's time)."""
    secret = _secret()
    procs = []
    try:
        for form in ("userinfo", "query-first", "query-later", "bare-percent"):
            env = {**os.environ, "PYQUEUE_DSN": _dsn_with(dsn, form, secret)}
            env.pop("PYQUEUE_DASHBOARD_TOKEN", None)
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "pyqueue_sql.cli", "dashboard", "--port", str(free_port())],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        for proc in procs:
            line = proc.stderr.readline()
            assert "dashboard of" in line and "***" in line, line
            _assert_hidden(line, secret)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:pw@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u@h/db?password=pw", "postgresql://u@h/db?password=***"),
        (
            "postgresql://u@h/db?sslmode=require&password=pw&x=1",
            "postgresql://u@h/db?sslmode=require&password=***&x=1",
        ),
        ("postgresql://u@h/db?Password=pw", "postgresql://u@h/db?Password=***"),
        ("postgresql://u@h/db?sslpassword=pw", "postgresql://u@h/db?sslpassword=***"),
        ("mysql://root:pa%zz@h/db", "mysql://root:***@h/db"),
        ("mysql://u:p@ss@h:3306/db", "mysql://u:***@h:3306/db"),
        ("mysql://u:pa/ss@h/db", "mysql://u:***@h/db"),
        ("postgresql://u:p?w@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:pw@h?password=x", "postgresql://u:***@h?password=***"),
        ("postgresql://h/db", "postgresql://h/db"),
        ("postgresql://u@h", "postgresql://u@h"),
        ("host=h password=pw dbname=x", "host=h password=*** dbname=x"),
    ],
)
def test_redact_dsn(dsn, shown):
    assert redact_dsn(dsn) == shown


def test_redact_masks_every_form_of_the_password_in_free_text():
    dsn = "postgresql://u:S%40cr%zzet@h/db?sslpassword=Other-Secret"
    assert dsn_secrets(dsn) >= {"S%40cr%zzet", "S@cr%zzet", "Other-Secret"}
    text = redact('invalid percent-encoded token: "S%40cr%zzet"; user "S@cr%zzet"; Other-Secret', dsn)
    assert "cr%zz" not in text and "Other-Secret" not in text and text.count("***") == 3
