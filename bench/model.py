"""The whole contract's stateful model run long: python -m bench model --examples N [--dialect D].
Runs tests/concurrency/test_model.py's test_the_whole_contract_matches_the_model with N examples
(PYQUEUE_MODEL_EXAMPLES) on the suite's servers."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench model", description=__doc__.split("\n")[0])
    p.add_argument("--examples", type=int, default=2000)
    p.add_argument("--dialect", choices=("postgresql", "mysql"))
    p.add_argument("--seed", type=int, help="hypothesis's seed (pytest --hypothesis-seed): a run to repeat")
    a = p.parse_args()
    test = "tests/concurrency/test_model.py::test_the_whole_contract_matches_the_model"
    cmd = [sys.executable, "-m", "pytest", test, "-q", "-s", "-p", "no:cacheprovider"]
    if a.dialect:
        cmd += ["-k", a.dialect]
    if a.seed is not None:
        cmd += [f"--hypothesis-seed={a.seed}"]
    env = dict(os.environ, PYQUEUE_MODEL_EXAMPLES=str(a.examples))
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
