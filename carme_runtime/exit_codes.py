# SPDX-License-Identifier: GPL-3.0-or-later
"""Process exit codes of the console scripts (one place, like httpie's ``status.py``).

Slurm hooks are special: ``carme-prolog`` and ``carme-epilog`` always return ``OK``, because slurmd drains the
node when a prolog or epilog exits non-zero; what goes wrong is logged, and fails the job where it must, never the
node (see ``hooks.py``).
"""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # generic failure of a non-hook command
    USAGE = 2  # bad command line (argparse convention)
    CONFIG = 3  # invalid configuration, policy or app spec
    SLURM = 4  # a Slurm command failed
    SECRET_MISSING = 10  # carme-launch: CARME_SESSION_SECRET missing or too short
    APP_NOT_READY = 11  # carme-launch: the app did not answer before the timeout
    APP_START_FAILED = 12  # carme-launch: the app could not be started
    NOT_IN_JOB = 13  # carme-launch: no SLURM_JOB_ID
    NETNS_UNAVAILABLE = 14  # carme-launch: the app needs a private network namespace and none can be made
    IMAGE_INVALID = 15  # carme-launch: the container image is missing or its digest differs from the catalogue's
    LOG_MISSING = 16  # carme-read-log: no such file
    LOG_REFUSED = 17  # carme-read-log: not a regular file, a link, unreadable, or run as root or a system user
