"""The one entry to every benchmark suite: python -m bench SUITE [options] (from the repository root).
`python -m bench` lists the suites, `python -m bench SUITE --help` gives a suite's options; --quick
stands for the suite's own small options (SUITES below; options after it win) and writes to
bench/results/ only. What each suite measures and how to read its table: bench/README.md."""

from __future__ import annotations

import os
import runpy
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Suite:
    module: str  # bench.<module>, run as __main__
    summary: str
    quick: tuple[str, ...]  # what --quick stands for
    args: tuple[str, ...] = ()  # the module's options this suite always runs with


SUITES = {  # name: Suite(module, summary, what --quick stands for[, the options it always runs with])
    "routines": Suite("bench", "each routine against pgmq, PGQueuer, a hand-rolled queue and the INSERT ceilings, interleaved",
        ("--quick",)),
    "burndown": Suite("burndown", "each system's own worker draining a backlog (--batch N: batch tasks; --features)",
        ("--quick",)),
    "latency": Suite("latency", "push to handler start of an idle worker; an idle worker's queries; pickup under a stream",
        ("--samples", "20", "--idle-seconds", "2", "--rounds", "1")),
    "soak": Suite("soak", "mixed load while workers are killed at random, then an exact accounting of every message",
        ("--minutes", "0.5", "--dialect", "postgresql", "--out", "bench/results")),
    "history": Suite("history", "clients run the contract's calls under faults, then a checker verifies every guarantee over the history",
        ("--ops", "3000", "--dialect", "postgresql")),
    "spark": Suite("spark_ingest", "bulk enqueue from Spark through queue_ingest against a plain JDBC append",
        ("--rows", "2000", "--dialect", "postgresql")),
    "held-snapshot": Suite("held_snapshot", "a queue at full churn while another session holds a snapshot: msg/s, reserve time, the horizon, a minute at a time",
        ("--minutes", "0.5", "--before", "15")),
    "batch-cost": Suite("batch_cost", "PostgreSQL: a batch push row's server CPU, the routine against pgmq and a scratch copy less each index",
        ("--quick",)),
    "worker-cpu": Suite("worker_cpu", "PostgreSQL: the threaded worker's own CPU and its sessions' per no-op job, with and without the tracing span",
        ("--quick",)),
    "ab": Suite("bench", "the routines of two versions of sql/ (a schema revision or a git commit), alternated",
        ("--previous-commit", "HEAD", "--rounds", "1", "--messages", "2000", "--dialects", "postgresql")),
    "mutants": Suite("mutants", "one-substitution mutants of sql/ (bench/mutants.jsonl) that the model and tests/contract must kill",
        ("--only", "1", "--examples", "5")),
    "model": Suite("mutants", "the whole contract's stateful model, long: --examples N --dialect D",
        ("--examples", "20"), ("--model",)),
    "profile": Suite("bench", "PostgreSQL: each routine's calls and server time per call, on the four workloads (ab --profile)",
        ("--rounds", "1", "--messages", "1000", "--dialects", "postgresql"), ("--profile",)),
}  # fmt: skip
RETIRED = ("held-xmin", "scale", "failover", "pgbouncer")  # figures recorded; they run from commit 4da0bbf


def usage() -> str:
    width = max(map(len, SUITES))
    lines = [f"  {name:<{width}}  {suite.summary}" for name, suite in SUITES.items()]
    return "usage: python -m bench SUITE [--quick] [options]\n\nsuites:\n" + "\n".join(lines) + "\n"


def argv_for(name: str, args: list[str]) -> list[str]:
    """The suite's own command line: --quick replaced by what it stands for, then the rest."""
    suite = SUITES[name]
    quick = list(suite.quick) if "--quick" in args else []
    return [f"python -m bench {name}", *suite.args, *quick, *(a for a in args if a != "--quick")]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0
    name, rest = args[0], args[1:]
    if name in RETIRED:
        sys.stderr.write(f"python -m bench: {name} left the tree; it runs from commit 4da0bbf\n")
        return 2
    if name not in SUITES:
        sys.stderr.write(f"python -m bench: no suite {name!r}; one of: {', '.join(SUITES)}\n")
        return 2
    sys.argv = argv_for(name, rest)
    os.environ["BENCH_COMMAND"] = " ".join(sys.argv)  # the reports' command (bench.common.command)
    # The suites' processes (workers, the CLI, installs) import this tree's package, not the one the
    # virtualenv's .pth names (another checkout's, when this is a second worktree sharing its venv).
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    try:
        runpy.run_module(f"bench.{SUITES[name].module}", run_name="__main__", alter_sys=True)
    except SystemExit as end:
        if isinstance(end.code, str):
            sys.stderr.write(end.code + "\n")  # a suite's one-line refusal, as sys.exit(text) prints it
        return end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
