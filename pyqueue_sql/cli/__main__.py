"""python -m pyqueue_sql.cli: the pyqueue-sql command."""

import sys

from . import main

sys.exit(main())
