# SPDX-License-Identifier: GPL-3.0-or-later
"""``python -m carme_admin`` is ``carme``."""

import sys

from carme_admin.commands import main

sys.exit(main())
