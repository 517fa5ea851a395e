"""PostgreSQL: the text[] arguments of a batch commit (PostgreSQLCodec.text_array) are dumped by a
dumper of the client's own, which writes a list of ASCII texts of one length with one join: the
same bytes as psycopg's own dumper for every list, and the server reads them back as they were."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.adapt import PyFormat, Transformer

from pyqueue_sql import dialects
from pyqueue_sql.dialects.postgresql import TextArray

pytestmark = pytest.mark.only_dialect("postgresql")

LISTS = [
    ["0b0c4c1e-1f7d-4b1e-9d7a-7a5a4d0f1e2b", "9f1c2a33-0000-4b1e-9d7a-7a5a4d0f1e2b"],  # tokens
    ["noop"] * 3,
    ["j000000001", "j000000002"],
    ["a", "bb", "ccc"],  # lengths differ
    ["aa", "b", "ccc"],  # the total of one length, lengths that differ
    ["é", "ü"],  # not ASCII
    ["a", None, "b"],
    ["", ""],
    [],
    ['a"b', "c\\d"],
]


@pytest.mark.parametrize("values", LISTS, ids=range(len(LISTS)))
def test_the_same_bytes_as_psycopg_and_read_back_as_they_were(dsn, values):
    conn = dialects.for_name("postgresql").connect(dsn)
    try:
        ours = Transformer(conn).get_dumper(TextArray(values), PyFormat.BINARY)
        theirs = Transformer(conn).get_dumper(list(values) or [""], PyFormat.BINARY)
        assert type(ours).__name__ == "TextArrayDumper"
        if values:
            assert ours.dump(TextArray(values)) == theirs.dump(list(values))
        [(back,)] = conn.execute("SELECT %b::text[]", [TextArray(values)]).fetchall()
        assert back == values
    finally:
        conn.close()


def test_on_a_connection_of_its_own_it_is_a_list(dsn):
    with psycopg.connect(dsn.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        [(back,)] = conn.execute("SELECT %b::text[]", [TextArray(["a", "bb"])]).fetchall()
    assert back == ["a", "bb"]
