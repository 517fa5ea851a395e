"""The tasks API is typed: `mypy --strict` passes on pyqueue_sql/tasks/ and on the example
application, and rejects a defer whose arguments do not match the task's function."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def mypy_cache(tmp_path_factory) -> Path:
    """One mypy cache for this file's runs (tests/conftest.py runs the file in one process): the
    first run reads the standard library's and the dependencies' stubs, 15-35 s of CPU, and the
    next reuses them (mypy's incremental mode, which checks what changed). Empty at first, as in
    a fresh clone."""
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(cache: Path, *files) -> subprocess.CompletedProcess:
    if shutil.which("mypy", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("mypy is not installed (the dev extra has it)")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--explicit-package-bases",
            "--cache-dir",
            str(cache),
            *map(str, files),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_py_typed_ships_in_the_package():
    assert (ROOT / "pyqueue_sql" / "py.typed").exists()


@pytest.mark.slow  # one mypy run, the first with an empty cache: 15-35 s
def test_mypy_strict_passes_on_the_tasks_api_and_the_example_and_rejects_a_wrong_defer(tmp_path, mypy_cache):
    bad = tmp_path / "bad_defer.py"
    bad.write_text(
        "from examples.tasks_app import User, send_welcome\n"
        "send_welcome.defer(42, User(1, 'Ada'))\n"
        "send_welcome.defer('a@example.com', User(1, 'Ada'), language='fr')\n"
        "send_welcome.configure(key='k').defer('a@example.com', user='Ada')\n"
        "send_welcome.call(42, User(1, 'Ada'))\n"
    )
    # a handle carries its task's return type, through defer, defer_async and configure
    reveal = tmp_path / "reveal_handle.py"
    reveal.write_text(
        "from pyqueue_sql import App\n"
        "app = App()\n"
        "@app.task(store_result=True)\n"
        "def fetch(n: int) -> int:\n"
        "    return n\n"
        "reveal_type(fetch.defer(1).result())\n"
        "reveal_type(fetch.configure(key='k').defer(1))\n"
        "async def main() -> None:\n"
        "    handle = await fetch.defer_async(1)\n"
        "    reveal_type(await handle.result_async())\n"
        "@app.task(store_result=True)\n"
        "async def fetch_async(n: int) -> str:\n"
        "    return str(n)\n"
        "reveal_type(fetch_async.defer(1).result())\n"
        "reveal_type(fetch.defer_many([fetch.call(1), fetch.configure(priority=1).call(2)]))\n"
        "reveal_type(fetch.parent_results())\n"
        "reveal_type(fetch_async.parent_result())\n"
        "reveal_type(app.group([fetch.defer(1)]).results())\n"
    )
    checked = ["pyqueue_sql/tasks", "pyqueue_sql/testing.py", "pyqueue_sql/worker/policy.py"]
    out = _mypy(mypy_cache, *checked, "examples/tasks_app.py", bad, reveal)
    revealed = [
        re.sub(
            r"pyqueue_sql\.tasks\.(\w+\.)?",
            "",
            line.split("Revealed type is ", 1)[1].replace("builtins.", ""),
        )
        for line in out.stdout.splitlines()
        if "Revealed type" in line
    ]
    assert revealed == [
        '"int"',
        '"TaskHandle[int]"',
        '"int"',
        '"str"',
        '"list[TaskHandle[int]]"',
        '"list[int]"',
        '"str"',
        '"list[int]"',
    ], out.stdout
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    # the API and the example are clean: every error is one of the wrong defers
    assert errors and all(line.startswith(str(bad)) for line in errors), out.stdout
    assert 'Argument 1 to "defer" of "Task" has incompatible type "int"; expected "str"' in out.stdout
    assert 'Unexpected keyword argument "language" for "defer"' in out.stdout
    assert 'Argument "user" to "defer" of "Task" has incompatible type "str"; expected "User"' in out.stdout
    assert 'Argument 1 to "call" of "Task" has incompatible type "int"; expected "str"' in out.stdout
    assert len(errors) == 4, out.stdout


@pytest.mark.slow  # one mypy run, the first with an empty cache: 15-35 s
def test_mypy_checks_a_signature_against_its_task_and_types_what_a_canvas_defers(tmp_path, mypy_cache):
    """task.s(...) takes the function's arguments, or all but the first (which a chained step gets
    from the step before): anything else is a mypy error; defer() of a signature, chain, chord and
    group is typed by the task the result comes from; the Celery example application is clean."""
    canvas = tmp_path / "canvas_use.py"
    canvas.write_text(
        "from pyqueue_sql import App, chain, chord, group\n"
        "app = App()\n"
        "@app.task(store_result=True)\n"
        "def add(x: int, y: int) -> int:\n"
        "    return x + y\n"
        "@app.task(store_result=True)\n"
        "async def label(total: int, prefix: str) -> str:\n"
        "    return prefix\n"
        "@app.task(store_result=True)\n"
        "def total(values: list[int]) -> int:\n"
        "    return sum(values)\n"
        "reveal_type(add.s(1, 2))\n"
        "reveal_type(label.s('sum'))\n"
        "reveal_type(add.s(1, 2).set(priority=1).defer().result())\n"
        "reveal_type(chain(add.s(1, 2), add.s(3), label.s('sum')).defer())\n"
        "reveal_type(chord([add.s(1, 2), add.s(3, 4)], total.s()).defer())\n"
        "reveal_type(group(add.s(1, 2), add.s(3, 4)).defer().results())\n"
        "reveal_type(chain(add.s(1, 2), group(add.s(3), add.s(4))).defer())\n"
        "add.s('1', 2)\n"
        "add.s(1, 2, 3)\n"
        "add.s(z=1)\n"
        "label.si('sum')\n"
        "add.s(1, 2).set(priority='high')\n"
    )
    out = _mypy(mypy_cache, "examples/celery_app.py", canvas)
    revealed = [
        re.sub(
            r"pyqueue_sql\.tasks\.(\w+\.)?",
            "",
            line.split("Revealed type is ", 1)[1].replace("builtins.", ""),
        )
        for line in out.stdout.splitlines()
        if "Revealed type" in line
    ]
    assert revealed == [
        '"Signature[int]"',
        '"Signature[str]"',
        '"int"',
        '"TaskHandle[str]"',
        '"TaskHandle[int]"',
        '"list[int]"',
        '"TaskGroup[int]"',
    ], out.stdout
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert all(line.startswith(str(canvas)) for line in errors), out.stdout
    lines = sorted({int(line.split(":")[1]) for line in errors})
    assert lines == [19, 20, 21, 22, 23], out.stdout
    assert 'No overload variant of "s" of "Task" matches argument types "str", "int"' in out.stdout
    assert 'Unexpected keyword argument "z"' in out.stdout
    assert 'No overload variant of "si" of "Task" matches argument type "str"' in out.stdout
    assert 'Argument "priority" to "set" of "Signature" has incompatible type "str"' in out.stdout
