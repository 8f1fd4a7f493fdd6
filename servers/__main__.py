"""``python -m openfunctions.servers`` is ``openfunctions-mcp``."""

import sys

from .cli import main

sys.exit(main())
