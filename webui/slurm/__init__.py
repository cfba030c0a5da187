# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's side of Slurm: the slurmrestd client and its tokens, its records as the portal's objects, the shared
cluster state, the :class:`~webui.slurm.scheduler.Scheduler` every feature asks, and the session submit body.

Nothing here knows a view or a feature package: sessions, reservations, quota and the pages talk to Slurm through it.
"""
