"""The released versions recorded in RELEASES (version, full commit, date), and the files of
one release read from git: what the frozen-schema test and the mixed-fleet test need."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from ..conftest import UNDER_CI

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ROOT / "RELEASES"
_LINE = re.compile(r"^(\d+\.\d+\.\d+)\s+([0-9a-f]{40})\s+(\d{4}-\d{2}-\d{2})$")


class Release(NamedTuple):
    version: str
    commit: str
    date: str


def releases() -> list[Release]:
    """Every line of RELEASES that is not a comment, oldest first; a malformed line is an error."""
    found = []
    for number, line in enumerate(RELEASES.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line.strip())
        assert match, f"RELEASES:{number}: expected 'VERSION FULL-COMMIT YYYY-MM-DD', got {line!r}"
        found.append(Release(*match.groups()))
    return found


def latest() -> Release:
    return releases()[-1]


def _git(*args: str, binary: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=not binary, timeout=60)


def require_history(commit: str) -> None:
    """Skips (with the reason) when there is no git history holding ``commit``; under CI=true
    that is a failure: CI clones with the full history."""
    reason = None
    if shutil.which("git") is None:
        reason = "git is not installed"
    elif _git("rev-parse", "--git-dir").returncode != 0:
        reason = f"{ROOT} is not a git checkout"
    elif _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        reason = f"the git history here does not hold the released commit {commit} (a shallow clone?)"
    if reason is None:
        return
    if UNDER_CI:
        pytest.fail(f"{reason}: CI must clone with the full history (fetch-depth: 0)")
    pytest.skip(reason)


def released_file(commit: str, path: str) -> bytes | None:
    """The bytes of ``path`` at ``commit`` (None when the commit has no such file)."""
    done = _git("show", f"{commit}:{path}", binary=True)
    return done.stdout if done.returncode == 0 else None


def export(commit: str, folder: Path) -> Path:
    """The tree of ``commit`` (``git archive``) unpacked into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
        capture_output=True,
        timeout=120,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True, timeout=120)
    return folder
