"""The released schema is frozen: what a released commit installed is what the same revision
installs today, since databases out there are recorded at it (RELEASES names the commits)."""

from __future__ import annotations

import pytest

from pyqueue_sql import dialects

from .releases import ROOT, latest, released_file, releases, require_history

# What defines the tables of 0.1.0 (the baseline revision and the DDL it runs). The routines
# are not frozen: every migrate installs the current ones (CONTRIBUTING.md and
# docs/operations.md, "Upgrading"); uninstall.sql removes whatever the head has.
FROZEN = ["migrations/versions/0001_baseline.py"] + [f"sql/{name}/schema.sql" for name in dialects.NAMES]


def test_releases_are_recorded_oldest_first():
    found = releases()
    assert found, "RELEASES lists no release"
    versions = [tuple(int(p) for p in r.version.split(".")) for r in found]
    assert versions == sorted(versions) and len(set(versions)) == len(versions), found
    assert latest().version == "0.1.0" or versions[-1] > (0, 1, 0)


def test_every_released_version_has_its_dated_changelog_heading():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    for release in releases():
        assert f"\n## {release.version} ({release.date})\n" in text, release
    assert text.index("\n## Unreleased\n") < text.index(f"\n## {latest().version} ("), (
        "new entries go under '## Unreleased', above the newest release"
    )


@pytest.mark.parametrize("path", FROZEN)
def test_the_released_schema_is_unchanged(path):
    """A table change after a release is a new revision (CONTRIBUTING.md, "Changing the schema after 0.1.0"), never an
    edit of the baseline or of schema.sql: a database recorded at 0001_baseline holds exactly
    what the released commit's files built."""
    for release in releases():
        require_history(release.commit)
        then = released_file(release.commit, path)
        assert then is not None, f"{path} is not in {release.version} ({release.commit})"
        now = (ROOT / path).read_bytes() if (ROOT / path).is_file() else None
        assert now == then, (
            f"{path} differs from release {release.version} ({release.commit[:12]}): "
            "put the change in a new revision (CONTRIBUTING.md) and restore the file with "
            f"`git show {release.commit[:12]}:{path} > {path}`"
        )
