"""bench/ is one harness: `python -m bench SUITE` runs every suite, each suite accepts what its
--quick stands for, a quick run never writes over bench/latest/, and bench/ holds no script that is
not a suite or a module the suites share. Nothing here measures or touches a database: a suite's
options are parsed and the suite stopped before it runs (a real --quick run: make bench-smoke)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import SUITES, argv_for, main, usage

ROOT = Path(__file__).resolve().parents[2]
# Modules of bench/ that are not suites: the entry and the shared helpers.
NOT_SUITES = {"__init__", "__main__", "common"}


class Parsed(Exception):
    def __init__(self, namespace: argparse.Namespace, unknown: list[str]):
        self.namespace, self.unknown = namespace, unknown


def parse_only(monkeypatch, name: str, args: list[str]) -> Parsed:
    """The suite's options as its own parser reads them, stopping the suite right after."""

    def parse_args(parser, argv=None, namespace=None):
        raise Parsed(*parser.parse_known_args(argv, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    monkeypatch.setenv("BENCH_COMMAND", "")  # (the entry sets it for the reports; restored after)
    # (a suite imported by another one, as ab imports routines, is run afresh, as in its own process)
    monkeypatch.delitem(sys.modules, f"bench.{SUITES[name].module}", raising=False)
    with pytest.raises(Parsed) as parsed:
        main([name, *args])
    return parsed.value


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_suite_accepts_its_quick_options(monkeypatch, name):
    parsed = parse_only(monkeypatch, name, ["--quick"])
    assert parsed.unknown == [], f"{name}: --quick stands for options the suite does not have"
    for option in ("out", "json"):
        where = str(getattr(parsed.namespace, option, None) or "")
        assert "latest" not in where, f"{name} --quick would write to {where}"


def test_options_after_quick_win(monkeypatch):
    parsed = parse_only(monkeypatch, "latency", ["--quick", "--samples", "7"])
    assert parsed.namespace.samples == 7
    assert argv_for("latency", ["--rounds", "2"]) == ["python -m bench latency", "--rounds", "2"]


def test_a_wrong_quick_option_is_caught(monkeypatch):
    """What the test above relies on: a suite's parser reports an option it does not have."""
    monkeypatch.setitem(SUITES, "latency", SUITES["latency"].__class__("latency", "", ("--no-such",)))
    assert parse_only(monkeypatch, "latency", ["--quick"]).unknown == ["--no-such"]


def test_the_reports_name_the_command_as_typed(monkeypatch):
    """runpy puts the suite's path in sys.argv[0]; the reports name the command at the entry."""
    monkeypatch.setenv("BENCH_COMMAND", "")
    seen = {}

    def run_module(name, run_name, alter_sys):  # as runpy does with alter_sys: argv[0] the module's path
        from bench import common

        monkeypatch.setattr(sys, "argv", [str(ROOT / "bench" / "latency.py"), *sys.argv[1:]])
        seen["command"] = common.command()

    monkeypatch.setattr("runpy.run_module", run_module)
    assert main(["latency", "--quick", "--samples", "7"]) == 0
    assert seen["command"] == "python -m bench latency " + " ".join(SUITES["latency"].quick) + " --samples 7"


def test_an_unknown_suite_is_refused(capsys):
    assert main(["no-such-suite"]) == 2
    assert "no suite 'no-such-suite'" in capsys.readouterr().err


def test_the_entry_lists_every_suite():
    shown = subprocess.run(
        [sys.executable, "-m", "bench"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert shown == usage()
    assert all(f"  {name} " in shown for name in SUITES)


def test_bench_holds_only_suites_and_their_shared_modules():
    modules = {p.stem for p in (ROOT / "bench").glob("*.py")}
    suites = {suite.module for suite in SUITES.values()}
    assert modules - suites - NOT_SUITES == set(), (
        "a script outside the harness: make it a suite or fold it in"
    )
    assert suites <= modules


def test_the_shared_table_writer_aligns_the_columns_it_is_told():
    from bench import common

    lines = common.table(["system", "msg/s"], [("pyqueue", "1,200"), ("pgmq", 900)], "lr")
    assert lines == ["| system | msg/s |", "| --- | ---: |", "| pyqueue | 1,200 |", "| pgmq | 900 |"]


def test_a_suite_option_takes_its_default_s_type():
    from bench import common

    ap = common.parser(
        "doc", ("--rounds", 3, ""), ("--cap", 0.0, ""), ("--out", None, ""), ("--quick", False, "")
    )
    args = ap.parse_args(["--rounds", "5", "--cap", "2", "--quick"])
    assert (args.rounds, args.cap, args.out, args.quick) == (5, 2.0, None, True)
    assert type(args.cap) is float


def test_every_mutant_still_finds_its_text_once():
    """A routine's rewrite must carry its mutants along: `bench mutants` refuses a file whose
    mutant text no longer occurs exactly once in its routine file."""
    from bench import mutants

    assert len(mutants.load(ROOT / "bench" / "mutants.jsonl")) > 100


def test_a_suite_s_refusal_is_printed(tmp_path, capsys, monkeypatch):
    """A suite that stops with a message (sys.exit(text)) prints it under the entry too."""
    # the entry runs the suite as __main__ (runpy): a copy another test imported would be a second one
    monkeypatch.delitem(sys.modules, "bench.mutants", raising=False)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"file": "sql/none.sql", "find": "x", "replace": "y"}\n')
    assert main(["mutants", "--file", str(bad)]) == 1
    assert "bad.jsonl:1: no file sql/none.sql" in capsys.readouterr().err
