# SPDX-License-Identifier: GPL-3.0-or-later
"""Carme runtime: sessions, container runtimes, GPU isolation checks, GPU-hour reports and Slurm hooks.

Runs on every node and inside every job, so it is stdlib-only and keeps imports lazy
(the prolog/epilog entry points must start in a few tens of milliseconds).
"""

__version__ = "0.1.0"
