"""bench/latest keeps the runs the documentation quotes, and only those: a results file nobody cites
is noise a reader has to sort through, and a cited one that is gone leaves a figure without its
evidence. The citing pages are docs/ (every page, its subfolders too), bench/README.md, and the
NOTES-*.md pages of bench/latest that those link to (their investigations, beside their results).
A citation is a path, never a bare name: a Markdown link that resolves into bench/latest, or the
path written out from the repository's root, `bench/latest/NAME` (`*` and `<dialect>` stand for any
part of a name). Reads files only."""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")
WRITTEN = re.compile(r"(?<![\w/.-])bench/latest/([\w.*<>-]+(?:/[\w.*<>-]+)*)")
# bench/latest/**/*.json is git-ignored (.gitignore): a run's every round, written beside its .md.
IGNORED = (".json",)


def latest(root: Path) -> Path:
    return (root / "bench" / "latest").resolve()


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def cited_by(page: Path, root: Path) -> tuple[set[Path], set[Path]]:
    """(the paths in bench/latest the page cites, every relative link target of the page)."""
    text = page.read_text(encoding="utf-8")
    cited, links = set(), set()
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        path = (page.parent / target).resolve()
        links.add(path)
        if inside(path, latest(root)) and path != latest(root):
            cited.add(path)
    for name in WRITTEN.findall(text):
        name = name.rstrip(".,").replace("<dialect>", "*")
        if name:
            cited.add(latest(root) / name)
    return cited, links


def citing_pages(root: Path) -> list[Path]:
    return [*sorted((root / "docs").rglob("*.md")), root / "bench" / "README.md"]


def citations(root: Path) -> tuple[dict[Path, list[Path]], dict[Path, list[Path]]]:
    """cited path -> the pages citing it, and NOTES page -> its relative links; a NOTES page of
    bench/latest cited by a page cites in turn."""
    cited: dict[Path, list[Path]] = {}
    notes_links: dict[Path, list[Path]] = {}
    pending, seen = citing_pages(root), set()
    while pending:
        page = pending.pop()
        if page in seen or not page.is_file():
            continue
        seen.add(page)
        paths, links = cited_by(page, root)
        if inside(page, latest(root)):
            notes_links[page] = sorted(links)
        for path in paths:
            cited.setdefault(path, []).append(page)
            if path.name.startswith("NOTES-") and path.suffix == ".md":
                pending.append(path)
    return cited, notes_links


def results_files(root: Path) -> list[Path]:
    return sorted(p.resolve() for p in latest(root).rglob("*") if p.is_file() and p.suffix not in IGNORED)


def is_glob(path: Path) -> bool:
    return "*" in path.name


def uncited(root: Path) -> list[str]:
    cited, _ = citations(root)
    patterns = [str(p) for p in cited if is_glob(p)]
    return [
        str(f.relative_to(latest(root)))
        for f in results_files(root)
        if f not in cited and not any(fnmatch.fnmatch(str(f), p) for p in patterns)
    ]


def missing(root: Path) -> list[str]:
    cited, notes_links = citations(root)
    gone = []
    for path, pages in sorted(cited.items()):
        where = ", ".join(sorted({str(p.relative_to(root)) for p in pages}))
        if is_glob(path):
            if not any(fnmatch.fnmatch(str(f), str(path)) for f in results_files(root)):
                gone.append(f"{where}: {path.relative_to(root)} matches no file")
        elif path.suffix not in IGNORED and not path.exists():
            gone.append(f"{where}: {path.relative_to(root)}")
    for page, links in sorted(notes_links.items()):  # a NOTES page's other links: the docs test skips it
        gone += [
            f"{page.relative_to(root)}: {os.path.relpath(link, root)}"
            for link in links
            if not inside(link, latest(root)) and not link.exists()
        ]
    return gone


def test_every_results_file_is_cited():
    """A file of bench/latest that no citing page names: cite it where its figure is quoted (a
    NOTES page of its topic will do), or delete it (git rm)."""
    assert not uncited(ROOT), "cited nowhere:\n" + "\n".join(uncited(ROOT))


def test_every_cited_results_file_exists():
    assert not missing(ROOT), "cited but missing:\n" + "\n".join(missing(ROOT))


def test_the_checks_see_an_uncited_and_a_missing_file(tmp_path):
    """A bare name is not a citation, a link through a NOTES page is, and a gone file is seen."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "bench" / "latest" / "sub").mkdir(parents=True)
    results = tmp_path / "bench" / "latest"
    for name in ("linked.md", "named-bare.md", "by-notes.md", "sub/written.md", "soak_mysql.md", "run.json"):
        (results / name).write_text("a run\n")
    (results / "NOTES-topic.md").write_text(
        "[run](by-notes.md), [gone](gone-from-notes.md), [a](../../docs/no.md)\n"
    )
    (tmp_path / "docs" / "page.md").write_text(
        "[a](../bench/latest/linked.md), named-bare.md, `bench/latest/sub/written.md`,\n"
        "[notes](../bench/latest/NOTES-topic.md#a-heading), `bench/latest/soak_<dialect>.md`,\n"
        "[gone](../bench/latest/gone.md), `bench/latest/run.json`\n"
    )
    (tmp_path / "bench" / "README.md").write_text("`bench/latest/also-gone.md`\n")
    assert uncited(tmp_path) == ["named-bare.md"]
    assert missing(tmp_path) == [
        "bench/README.md: bench/latest/also-gone.md",
        "bench/latest/NOTES-topic.md: bench/latest/gone-from-notes.md",
        "docs/page.md: bench/latest/gone.md",
        "bench/latest/NOTES-topic.md: docs/no.md",
    ]
