"""SQL blocks run through the driver when the psql / mariadb command-line client is not installed,
with the client's semantics for what the documentation uses: psql's `\\gset` and `:'var'` /
`:var`, one result table per statement (psql's aligned format, mariadb's --table format), every
result set of a MySQL CALL, autocommit, and a failure on the first error (ON_ERROR_STOP)."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

PSQL_VARIABLE = re.compile(r"(?<!:):('?)([A-Za-z_]\w*)\1")


def split(sql: str) -> list[str]:
    """Statements at each ';' outside quotes and comments (the ';' kept)."""
    parts, start, quote, i = [], 0, None, 0
    while i < len(sql):
        c = sql[i]
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"`":
            quote = c
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = len(sql) if end < 0 else end
            continue
        elif c == ";":
            parts.append(sql[start : i + 1])
            start = i + 1
        i += 1
    tail = sql[start:]
    if re.sub(r"--[^\n]*", "", tail).strip():
        parts.append(tail)
    return [p for p in parts if re.sub(r"--[^\n]*", "", p).strip(" ;\n\t")]


def psql_table(names: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(n)] + [len(r[k]) for r in rows]) for k, n in enumerate(names)]
    lines = [" " + " | ".join(n.center(w) for n, w in zip(names, widths)).rstrip()]
    lines.append("+".join("-" * (w + 2) for w in widths))
    lines += [" " + " | ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(lines) + "\n\n"


def mysql_table(names: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(n)] + [len(r[k]) for r in rows]) for k, n in enumerate(names)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [rule, "| " + " | ".join(n.ljust(w) for n, w in zip(names, widths)) + " |", rule]
    lines += ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |" for r in rows]
    lines.append(rule)
    return "\n".join(lines) + "\n"


def run_psql(dsn: str, script: str, variables: dict[str, str]) -> str:
    import psycopg

    out = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        for statement in split_psql(script):
            gset = statement.rstrip().endswith("\\gset")
            if gset:
                statement = statement.rstrip()[: -len("\\gset")]

            def value(match: re.Match) -> str:
                quoted, name = match.groups()
                if name not in variables:
                    return match.group(0)
                v = variables[name]
                return "'" + v.replace("'", "''") + "'" if quoted else v

            sql = PSQL_VARIABLE.sub(value, statement)
            cur = conn.cursor()
            cur.execute(sql)
            while True:
                if cur.description is not None:
                    names = [d.name for d in cur.description]
                    result = cur.pgresult
                    rows = [
                        [_text(result.get_value(r, c), null="") for c in range(result.nfields)]
                        for r in range(result.ntuples)
                    ]
                    if gset:
                        assert len(rows) == 1, f"\\gset needs exactly one row, got {len(rows)}"
                        variables.update(zip(names, rows[0]))
                    else:
                        out.append(psql_table(names, rows))
                if not cur.nextset():
                    break
    return "".join(out)


def split_psql(script: str) -> list[str]:
    """Statements ending in ';' or in a psql `\\gset`."""
    found, current = [], []
    for line in script.splitlines():
        current.append(line)
        code = re.sub(r"--.*$", "", line).rstrip()
        if code.endswith(";") or code.endswith("\\gset"):
            found.append("\n".join(current))
            current = []
    return found


def run_mysql(dsn: str, script: str) -> str:
    import pymysql

    url = urlsplit(dsn)
    conn = pymysql.connect(
        host=url.hostname or "127.0.0.1",
        port=url.port or 3306,
        user=unquote(url.username or "root"),
        password=unquote(url.password or ""),
        database=url.path.lstrip("/"),
        autocommit=True,
        conv={},  # every value as the server sends it: text, as the mariadb client shows it
    )
    out = []
    try:
        with conn.cursor() as cur:
            for statement in split(script):
                cur.execute(statement)
                while True:
                    rows = cur.fetchall() if cur.description else ()
                    if rows:  # the mariadb client prints no table for an empty result
                        names = [d[0] for d in cur.description]
                        out.append(mysql_table(names, [[_text(v) for v in row] for row in rows]))
                    if not cur.nextset():
                        break
    finally:
        conn.close()
    return "".join(out)


def _text(value, null: str = "NULL") -> str:
    if value is None:
        return null
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
