# SPDX-License-Identifier: GPL-3.0-or-later
"""``python -m carme_runtime``: the launcher (same as ``carme-launch``)."""

import sys

from carme_runtime.entry_points import launch_main

sys.exit(launch_main())
