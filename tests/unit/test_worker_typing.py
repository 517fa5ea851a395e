"""A type checker rejects a misspelt or mistyped keyword of Worker and AsyncWorker (their
**settings are typed by pyqueue_sql.worker.settings.WorkerOptions) and takes the right ones."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # one mypy run: 5-30 s
def test_mypy_rejects_a_misspelt_or_mistyped_worker_keyword(tmp_path):
    if shutil.which("mypy", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("mypy is not installed (the dev extra has it)")
    source = tmp_path / "workers.py"
    source.write_text(
        "from pyqueue_sql import Worker\n"
        "from pyqueue_sql.aio import AsyncWorker\n"
        "Worker('postgresql://h/d', concurrency=4, lease=30.0, commit_reserve=True)\n"
        "AsyncWorker('postgresql://h/d', connections=2, prefetch=None)\n"
        "Worker('postgresql://h/d', concurrancy=4)\n"
        "AsyncWorker('postgresql://h/d', lease='30')\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(source),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["5", "6"], done.stdout
    assert 'Unexpected keyword argument "concurrancy"' in errors[0]
    assert 'Argument "lease"' in errors[1]
