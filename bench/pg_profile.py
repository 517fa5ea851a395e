"""Where a PostgreSQL call's server time goes: each routine's own time, pyqueue-sql beside pgmq.

    python bench/pg_profile.py                      # 1 and 4 clients, every workload (~2 min)
    python bench/pg_profile.py --clients 1 --transactions 3000 --workloads reserve_ack

One fresh database holds both systems (pyqueue-sql as `make migrate` installs it, pgmq from the SQL
its PyPI package ships, as bench.py does), each with one queue of --backlog messages. The database
runs with `track_functions = 'all'`, so the server counts, for every function, its calls, its total
time and its own time (the total without the functions it calls: pg_stat_user_functions). pgbench
drives each workload, so no Python client stands between the two systems:

  push               queue_push                               pgmq.send
  reserve_ack        queue_reserve(n=1) + queue_commit        pgmq.read(vt, 1) + pgmq.delete(id)
  push_batch         queue_push_batch of 100                  pgmq.send_batch of 100
  reserve_ack_batch  queue_reserve(n=100) + queue_commit_batch  pgmq.read(vt, 100) + pgmq.delete(ids)

Before each run: VACUUM of both queue tables and pg_stat_reset() (so it needs a superuser, as the
other benchmarks' admin DSN is). Reported per workload, clients and system: pgbench's transactions
per second and mean latency, and each routine's calls and microseconds per call (total and own),
from the counters after the run. The functions' time does not count what the call costs outside
them: parsing and planning the top-level statement, the commit and its WAL flush, the network.
The counting itself reads the clock around every function call, which costs a routine that calls
helpers (pyqueue-sql's) more than one that does not (pgmq's): use this for where a routine's time
goes, and --no-track for throughput.

    python bench/pg_profile.py --no-track --rounds 3 --clients 4

--no-track counts nothing (the database keeps the server's track_functions): pgbench's throughput
is then the two systems' side by side with a C client, what a psql or libpq application meets, and
the report adds, per workload and client count, the median over the rounds of pyqueue-sql's
throughput over pgmq's (each round runs every system, in an order that rotates; with --floor also
the bare statements' over pgmq's). Set beside bench.py's
ratios (the same workloads through each system's Python client), it shows how much of those is the
server and how much the client.

--previous-commit C adds pyqueue-sql as git commit C has it (its sql/postgresql/schema.sql and
routines.sql, installed with psql into a database of its own with the same backlog), run with the same
scripts: a change to the routines measured on the server, with no Python client in between
(bench/revision_ab.py measures the same through the client). The report adds pyqueue over previous.

    python bench/pg_profile.py --no-track --rounds 10 --clients 2 --workloads push_batch --previous-commit <commit>

Writes bench/results/pg_profile-<time>.{md,json} (--out DIR).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

QUEUE = "prof"

# pgbench scripts per workload and system. pgbench substitutes :name anywhere in the text, also
# inside quotes, with the \gset values of the statement before. A key is written as one literal
# ('p:k-:client_id'), not concatenated in SQL: `'p' || :k` is text || integer, pg_catalog.anytextcat,
# an SQL function that the planner inlines, parsing its body, at every call (a tenth of a push's
# server time, which pgmq's script does not pay); `|| i::text` in the batches is the built-in textcat.
SCRIPTS = {
    "push": {
        "pyqueue": "\\set k random(1, 2000000000)\n"
        f"SELECT queue_push('{QUEUE}', 'p:k-:client_id', 'job', "
        '\'{"n": 1, "kind": "bench"}\');\n',
        "pgmq": f'SELECT pgmq.send(\'{QUEUE}\', \'{{"n": 1, "kind": "bench"}}\');\n',
    },
    "reserve_ack": {
        "pyqueue": f"SELECT p_key, token FROM queue_reserve('{QUEUE}', 'w', interval '300 s', 1) \\gset\n"
        f"SELECT queue_commit('{QUEUE}', ':p_key', 'job', ':token');\n",
        "pgmq": f"SELECT msg_id FROM pgmq.read('{QUEUE}', 300, 1) \\gset\n"
        f"SELECT pgmq.delete('{QUEUE}', :msg_id::bigint);\n",
    },
    "push_batch": {
        "pyqueue": "\\set k random(1, 2000000000)\n"
        f"SELECT queue_push_batch('{QUEUE}', ARRAY(SELECT 'b:k-:client_id-' || i::text "
        "FROM generate_series(1, 100) i), array_fill('job'::text, ARRAY[100]), "
        'array_fill(\'{"n": 1, "kind": "bench"}\'::jsonb, ARRAY[100]));\n',
        "pgmq": f'SELECT pgmq.send_batch(\'{QUEUE}\', array_fill(\'{{"n": 1, "kind": "bench"}}\'::jsonb, '
        "ARRAY[100]));\n",
    },
    "reserve_ack_batch": {
        "pyqueue": "SELECT array_agg(p_key::text) AS ks, array_agg(token::text) AS ts "
        f"FROM queue_reserve('{QUEUE}', 'w', interval '300 s', 100) \\gset\n"
        f"SELECT queue_commit_batch('{QUEUE}', ':ks'::text[], array_fill('job'::text, ARRAY[100]), "
        "':ts'::text[]);\n",
        "pgmq": f"SELECT array_agg(msg_id) AS ids FROM pgmq.read('{QUEUE}', 300, 100) \\gset\n"
        f"SELECT count(*) FROM pgmq.delete('{QUEUE}', ':ids'::bigint[]);\n",
    },
}
# --floor: the hand-rolled queue's statements for the same work on the live table, sent directly (no
# function, no check, no bound, one priority, no dead-lettering): what the table costs without the
# routines. A reference, not a bound: the routines run other statements, and can beat these.
COLUMNS = "(queue_name, p_key, p_kind, payload, priority, scheduled_at, scheduled_at_initially, created_at)"
CLAIM = (
    "WITH c AS (SELECT m.ctid FROM pyqueue_message m WHERE m.queue_name = '{q}' AND m.priority = 0 "
    "AND m.scheduled_at > '-infinity' AND m.scheduled_at <= now() ORDER BY m.scheduled_at, m.id LIMIT {n} "
    "FOR UPDATE SKIP LOCKED), u AS (UPDATE pyqueue_message m SET scheduled_at = now() + interval '300 s', "
    "attempts = m.attempts + 1, reserved_by = 'w', reserve_token = gen_random_uuid() FROM c "
    "WHERE m.ctid = c.ctid RETURNING m.p_key, m.reserve_token) "
)
FLOOR = {
    "push": "\\set k random(1, 2000000000)\n"
    f"INSERT INTO pyqueue_message {COLUMNS} VALUES ('{QUEUE}', 'f:k-:client_id', 'job', "
    '\'{"n": 1, "kind": "bench"}\', 0, now(), now(), now()) ON CONFLICT DO NOTHING;\n',
    "reserve_ack": CLAIM.format(q=QUEUE, n=1) + "SELECT p_key, reserve_token AS token FROM u \\gset\n"
    f"DELETE FROM pyqueue_message WHERE queue_name = '{QUEUE}' AND p_key = ':p_key' AND p_kind = 'job' "
    "AND reserve_token = ':token';\n",
    "push_batch": "\\set k random(1, 2000000000)\n"
    f"INSERT INTO pyqueue_message {COLUMNS} SELECT '{QUEUE}', 'g:k-:client_id-' || i::text, 'job', "
    '\'{"n": 1, "kind": "bench"}\', 0, now(), now(), now() FROM generate_series(1, 100) i ON CONFLICT DO NOTHING;\n',
    "reserve_ack_batch": CLAIM.format(q=QUEUE, n=100)
    + "SELECT array_agg(p_key::text) AS ks, array_agg(reserve_token::text) AS ts FROM u \\gset\n"
    "DELETE FROM pyqueue_message m USING unnest(':ks'::text[], ':ts'::text[]) AS d (k, t) "
    f"WHERE m.queue_name = '{QUEUE}' AND m.p_key = d.k AND m.p_kind = 'job' AND m.reserve_token = d.t::uuid;\n",
}
for _workload, _script in FLOOR.items():
    SCRIPTS[_workload]["floor"] = _script

# messages per transaction; a batch workload runs a tenth of --transactions per client
BATCH_SHARE = {"push": 1, "reserve_ack": 1, "push_batch": 100, "reserve_ack_batch": 100}


def per_client(workload: str, transactions: int) -> int:
    return transactions if BATCH_SHARE[workload] == 1 else max(transactions // 10, 20)


OURS = ("queue_", "pyqueue__")


def pgbench_binary() -> str:
    found = shutil.which("pgbench")
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"), reverse=True):
        return str(candidate)
    sys.exit("pg_profile: no pgbench binary (Debian: apt-get install postgresql-client)")


def fill(dsn: str, backlog: int, pgmq: bool = True) -> None:
    common.execute(
        "postgresql",
        dsn,
        f"SELECT queue_push_batch('{QUEUE}', ARRAY(SELECT 'k' || i FROM generate_series(1, {backlog}) i), "
        f"array_fill('job'::text, ARRAY[{backlog}]), "
        f"ARRAY(SELECT jsonb_build_object('n', i, 'kind', 'bench') FROM generate_series(1, {backlog}) i))",
        *(
            [
                f"SELECT count(*) FROM pgmq.send_batch('{QUEUE}', "
                f"ARRAY(SELECT jsonb_build_object('n', i, 'kind', 'bench') FROM generate_series(1, {backlog}) i))"
            ]
            if pgmq
            else []
        ),
    )


def run(pgbench: str, dsn: str, script: Path, clients: int, transactions: int, pgmq: bool = True) -> dict:
    common.execute(
        "postgresql",
        dsn,
        "VACUUM pyqueue_message",
        *([f"VACUUM pgmq.q_{QUEUE}"] if pgmq else []),
        "SELECT pg_stat_reset()",
    )
    out = subprocess.run(
        [
            pgbench,
            "-n",
            "-f",
            str(script),
            "-c",
            str(clients),
            "-j",
            str(clients),
            "-t",
            str(transactions),
            dsn,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0 or "aborted" in out.stdout + out.stderr:
        raise RuntimeError(f"pgbench failed on {script.name}: {out.stderr.strip()[-400:]}")
    tps = latency = None
    for line in out.stdout.splitlines():
        if line.startswith("tps ="):
            tps = float(line.split()[2])
        elif line.startswith("latency average ="):
            latency = float(line.split()[3])
    time.sleep(0.5)  # the backends of pgbench's clients report their counters as they exit
    rows = common.execute(
        "postgresql",
        dsn,
        "SELECT schemaname || '.' || funcname, sum(calls)::bigint, sum(total_time), sum(self_time) "
        "FROM pg_stat_user_functions WHERE calls > 0 GROUP BY 1 ORDER BY sum(self_time) DESC",
    )
    functions = [
        {"function": name, "calls": calls, "total_us": 1000 * total / calls, "self_us": 1000 * own / calls}
        for name, calls, total, own in rows
    ]
    return {"tps": tps, "latency_ms": latency, "functions": functions}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--clients", default="1,4", help="comma-separated pgbench client counts (default 1,4)"
    )
    parser.add_argument(
        "--transactions", type=int, default=1500, help="per client (a tenth of it for the batch workloads)"
    )
    parser.add_argument("--backlog", type=int, default=100_000, help="messages queued in each system first")
    parser.add_argument("--workloads", default=",".join(SCRIPTS))
    parser.add_argument("--rounds", type=int, default=1, help="runs of everything, interleaved (default 1)")
    parser.add_argument(
        "--no-track", action="store_true", help="count no function time: throughput side by side (see above)"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also run the hand-rolled queue's statements on the live table, no routine (see FLOOR)",
    )
    parser.add_argument(
        "--previous-commit",
        help="also run pyqueue-sql as this git commit has it, in its own database (see above)",
    )
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    for w in workloads:
        if w not in SCRIPTS:
            parser.error(f"unknown workload {w!r} (of {', '.join(SCRIPTS)})")
    clients = [int(c) for c in args.clients.split(",") if c]
    pgbench = pgbench_binary()
    common.exit_on_sigterm()
    started = dt.datetime.now(dt.timezone.utc)
    load_before = os.getloadavg()
    dsn = common.create("postgresql", "profile")
    dsns = {"pyqueue": dsn, "pgmq": dsn, "floor": dsn}
    results: list[dict] = []
    try:
        common.install_pyqueue(dsn)
        from pgmq.install import install_pgmq_from_sql

        install_pgmq_from_sql(dsn=dsn)
        name = dsn.rsplit("/", 1)[1]
        common.execute("postgresql", dsn, f"SELECT queue_create('{QUEUE}')", f"SELECT pgmq.create('{QUEUE}')")
        if not args.no_track:
            common.execute("postgresql", dsn, f"ALTER DATABASE \"{name}\" SET track_functions = 'all'")
        # every reserve run takes its messages from the one backlog (the floor's from pyqueue-sql's)
        needed = (
            (2 if args.floor else 1)
            * args.rounds
            * sum(
                n * per_client(w, args.transactions) * BATCH_SHARE[w]
                for w in workloads
                if w.startswith("reserve")
                for n in clients
            )
        )
        fill(dsn, max(args.backlog, needed + 1000))
        common.execute("postgresql", dsn, "ANALYZE pyqueue_message", f"ANALYZE pgmq.q_{QUEUE}")
        if args.previous_commit:
            dsns["previous"] = common.create("postgresql", "profile_previous")
            common.install_commit("postgresql", dsns["previous"], args.previous_commit)
            common.execute("postgresql", dsns["previous"], f"SELECT queue_create('{QUEUE}')")
            if not args.no_track:
                previous_name = dsns["previous"].rsplit("/", 1)[1]
                common.execute(
                    "postgresql",
                    dsns["previous"],
                    f"ALTER DATABASE \"{previous_name}\" SET track_functions = 'all'",
                )
            fill(dsns["previous"], max(args.backlog, needed + 1000), pgmq=False)
            common.execute("postgresql", dsns["previous"], "ANALYZE pyqueue_message")
        with tempfile.TemporaryDirectory() as tmp:
            for round_no, workload, n in (
                (r, w, n) for r in range(args.rounds) for w in workloads for n in clients
            ):
                systems = (
                    ["pyqueue", "pgmq"]
                    + (["floor"] if args.floor else [])
                    + (["previous"] if args.previous_commit else [])
                )
                turn = round_no % len(systems)
                for system in systems[turn:] + systems[:turn]:  # each round starts with another one
                    script = Path(tmp) / f"{workload}-{system}.sql"
                    script.write_text(SCRIPTS[workload]["pyqueue" if system == "previous" else system])
                    result = run(
                        pgbench,
                        dsns[system],
                        script,
                        n,
                        per_client(workload, args.transactions),
                        pgmq=system != "previous",
                    )
                    result.update(workload=workload, clients=n, system=system, round=round_no + 1)
                    results.append(result)
                    mine = [f for f in result["functions"] if f["function"].split(".")[-1].startswith(OURS)]
                    shown = mine if system in ("pyqueue", "previous") else result["functions"]
                    print(
                        f"{workload:18s} {n} client(s) {system:8s} {result['tps']:9.1f} tps "
                        + " ".join(f"{f['function'].split('.')[-1]}={f['self_us']:.0f}" for f in shown[:6]),
                        flush=True,
                    )
    finally:
        for each in set(dsns.values()):
            common.drop("postgresql", each)
    write(args.out, started, load_before, os.getloadavg(), results)


def write(out: str, started: dt.datetime, before: tuple, after: tuple, results: list[dict]) -> None:
    stamp = started.strftime("%Y-%m-%dT%H%M%SZ")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"pg_profile-{stamp}.json").write_text(json.dumps(results, indent=1))
    lines = [
        f"# Server time per routine (`python bench/pg_profile.py`, {started:%Y-%m-%d %H:%M} UTC)",
        "",
        f"Load average {before[0]:.1f} before, {after[0]:.1f} after. pgbench transactions per second; "
        + (
            "each function's microseconds per call, total (with what it calls) / own, from "
            "pg_stat_user_functions (track_functions = all)."
            if any(r["functions"] for r in results)
            else "no function time counted (--no-track)."
        ),
        "",
        "| workload | clients | system | tps | latency ms | function: calls, total / own µs per call |",
        "|---|---|---|---:|---:|---|",
    ]
    for r in results:
        functions = "; ".join(
            f"{f['function'].split('.')[-1]}: {f['calls']}, {f['total_us']:.0f} / {f['self_us']:.0f}"
            for f in r["functions"][:8]
        )
        lines.append(
            f"| {r['workload']} | {r['clients']} | {r['system']} | {r['tps']:,.0f} | {r['latency_ms']:.3f} | {functions} |"
        )
    ratios: dict[tuple[str, str, int], list[float]] = {}
    for r in results:
        if r["system"] != "pgmq":
            [theirs] = [
                o["tps"]
                for o in results
                if o["system"] == "pgmq"
                and (o["workload"], o["clients"], o["round"]) == (r["workload"], r["clients"], r["round"])
            ]
            ratios.setdefault((r["workload"], r["system"], r["clients"]), []).append(r["tps"] / theirs)
    lines += [
        "",
        "Throughput over pgmq's (transactions of the same size): the median of the per-round ratios and "
        "their range. pyqueue: its routines; floor (--floor): the bare statements on the live table.",
        "",
        "| workload | system | clients | over pgmq |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {w} | {system} | {n} | {statistics.median(v):.2f}x ({min(v):.2f}-{max(v):.2f}) |"
        for (w, system, n), v in ratios.items()
    ]
    over_previous: dict[tuple[str, int], list[float]] = {}
    for r in results:
        if r["system"] == "pyqueue":
            for o in results:
                if o["system"] == "previous" and (o["workload"], o["clients"], o["round"]) == (
                    r["workload"],
                    r["clients"],
                    r["round"],
                ):
                    over_previous.setdefault((r["workload"], r["clients"]), []).append(r["tps"] / o["tps"])
    if over_previous:
        lines += [
            "",
            "pyqueue over previous (--previous-commit, the same scripts): the median of the per-round "
            "ratios and their range.",
            "",
            "| workload | clients | pyqueue over previous |",
            "|---|---|---|",
        ]
        lines += [
            f"| {w} | {n} | {statistics.median(v):.2f}x ({min(v):.2f}-{max(v):.2f}) |"
            for (w, n), v in over_previous.items()
        ]
    (folder / f"pg_profile-{stamp}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {folder}/pg_profile-{stamp}.md and .json")


if __name__ == "__main__":
    main()
