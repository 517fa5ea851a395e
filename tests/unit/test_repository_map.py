"""README.md's map of the repository ("Layout") stays true: every path it names exists, and every
top-level folder and file of the repository and every module and subpackage of pyqueue_sql is
named in it, so a moved or new one fails here until the map says where it went."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DIALECTS = ("postgresql", "mysql")
# A path named in an entry's description: a file with an extension, or a folder ending in "/".
PATH = re.compile(
    r"(?<![\w./<>-])((?:[\w.<>-]+/)*(?:[\w<>-]+\.(?:py|sql|md|sh|toml|yml|mjs|json)|[\w.<>-]+/))"
)


def layout_block(readme: str) -> str:
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```text\n", 1)[1].split("```", 1)[0]


def entries(block: str) -> dict[str, str]:
    """The map's entries: the path in the first column -> its description (continuation lines
    are indented)."""
    found, current = {}, None
    for line in block.splitlines():
        if not line.strip():
            continue
        if line[0] != " ":
            current, _, rest = line.partition(" ")
            found[current] = rest.strip()
        else:
            assert current, f"a continuation line before any entry: {line!r}"
            found[current] += " " + line.strip()
    return found


def expand(path: str) -> list[str]:
    return [path.replace("<dialect>", d) for d in DIALECTS] if "<dialect>" in path else [path]


def missing_paths(block: str) -> list[str]:
    """Every path the map names that does not exist: an entry's own path from the root, a path in
    its description from the entry's folder or from the root."""
    missing = []
    for entry, description in entries(block).items():
        for path in expand(entry):
            if not (ROOT / path).exists():
                missing.append(entry)
        for base in expand(entry.rstrip("/")) if entry.endswith("/") else ["."]:
            folder = base  # a name resolves in the folder named last before it, the entry's, or the root
            for named in PATH.findall(description):
                found = [ROOT / f / named for f in (folder, base, ".") if (ROOT / f / named).exists()]
                if not found:
                    missing.append(f"{entry}: {named}")
                elif named.endswith("/"):
                    folder = str(found[0].relative_to(ROOT))
    return sorted(set(missing))


def tracked() -> list[str]:
    """The repository's files as git knows them (a file being written and not yet added is not
    the map's business until it is committed)."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [path for path in out.splitlines() if (ROOT / path).exists()]


def tracked_top_level() -> set[str]:
    names = set()
    for path in tracked():
        first, sep, _ = path.partition("/")
        if first != ".gitignore":
            names.add(first + "/" if sep else first)
    return names


def package_modules() -> set[str]:
    """pyqueue_sql's modules and subpackages, as the map names them (client.py, worker/)."""
    found = set()
    for path in tracked():
        parts = path.split("/")
        if parts[0] == "pyqueue_sql" and len(parts) == 2 and parts[1].endswith(".py"):
            found.add(parts[1])
        elif parts[0] == "pyqueue_sql" and len(parts) == 3 and parts[2] == "__init__.py":
            found.add(parts[1] + "/")
    return found - {"__init__.py"}


BLOCK = layout_block((ROOT / "README.md").read_text(encoding="utf-8"))


def test_every_path_the_map_names_exists():
    assert not missing_paths(BLOCK), "README.md's map names paths that do not exist:\n" + "\n".join(
        missing_paths(BLOCK)
    )


def test_every_top_level_entry_is_in_the_map():
    named = {e.split("/")[0] + ("/" if "/" in e else "") for e in entries(BLOCK)}
    assert not tracked_top_level() - named, f"not in README.md's map: {sorted(tracked_top_level() - named)}"


def described_modules(description: str) -> set[str]:
    """The paths a description names, and the folders leading to them: `contrib/django/` names the
    subpackage contrib/ too."""
    found = set()
    for path in PATH.findall(description):
        parts = path.rstrip("/").split("/")
        found |= {"/".join(parts[: i + 1]) + "/" for i in range(len(parts) - 1)} | {path}
    return found


def test_every_module_of_the_package_is_in_the_map():
    described = described_modules(entries(BLOCK)["pyqueue_sql/"])
    assert not package_modules() - described, (
        f"pyqueue_sql modules not in README.md's map: {sorted(package_modules() - described)}"
    )


def test_the_checks_catch_a_stale_map():
    """A map naming a file that is gone, or leaving a module out, is caught."""
    stale = BLOCK.replace("cli/ (pyqueue-sql)", "cli.py (pyqueue-sql)")
    assert "pyqueue_sql/: cli.py" in missing_paths(stale)
    assert "cli/" not in described_modules(entries(stale)["pyqueue_sql/"])
    assert described_modules("contrib/django/ (the Django app)") == {"contrib/", "contrib/django/"}
    assert "cli/" not in set(PATH.findall(entries(stale)["pyqueue_sql/"]))
    assert "sql/<dialectx>/" in missing_paths(BLOCK.replace("sql/<dialect>/", "sql/<dialectx>/"))
    assert "pyqueue_sql/: policy.py" in missing_paths(BLOCK.replace("worker/ (", "aio/ ("))
