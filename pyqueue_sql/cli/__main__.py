"""python -m pyqueue_sql.cli: the pyqueue-sql command."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
