"""`make release-routines`: freezes the newest revision's routines (pyqueue_sql.migrate.release_routines).

Run it when the newest migration revision is released, before a new revision
changes sql/<dialect>/routines.sql.
"""

from __future__ import annotations

import sys

from pyqueue_sql.migrate import MigrationError, release_routines


def main() -> int:
    try:
        revision = release_routines()
    except MigrationError as exc:
        print(f"make release-routines: {exc}", file=sys.stderr)
        return 1
    print(f"froze the routines of {revision} into migrations/sql/<dialect>/{revision}.routines.sql")
    return 0


if __name__ == "__main__":
    sys.exit(main())
