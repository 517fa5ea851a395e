"""Plain SQL on a PyMySQL connection, as the mysql client runs it: every result set of a CALL is
read (a procedure's last one is its status), and the first one's rows are returned."""

from __future__ import annotations


def call(conn, statement: str, *args) -> list:
    with conn.cursor() as cur:
        cur.execute(statement, args or None)
        rows = list(cur.fetchall()) if cur.description else []
        while cur.nextset():
            pass
    return rows
