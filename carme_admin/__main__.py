"""``python -m carme_admin`` is ``carme``."""

import sys

from carme_admin.cli import main

sys.exit(main())
