# SPDX-License-Identifier: GPL-3.0-or-later
"""Projects (``/projects``): a project is a Slurm account. Its members are the users with an association in it, its
managers the account's coordinators, its GPU budget the account's GrpTRESMins, all read from Slurm (slurmdbd through
slurmrestd), which also enforces them; the portal keeps no copy. Members see their projects' budget and use this
month; managers and administrators see a project's report (GPU-hours by member and every job, from the portal or
``sbatch``) and its CSV."""
