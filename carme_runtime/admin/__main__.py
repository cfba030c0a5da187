"""``python -m carme_runtime.admin`` is ``carme``."""

import sys

from carme_runtime.admin.cli import main

sys.exit(main())
