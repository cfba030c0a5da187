# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU reservations (issue 16): requests, decisions, Slurm reservations and the calendar.

* :mod:`webui.reservations.views`: the ``reservations`` blueprint (``/reservations``, the admin's decisions, the feed);
* :mod:`webui.reservations.policy`: what a user may reserve (pure); :mod:`webui.reservations.service`: requests and
  decisions; :mod:`webui.reservations.calendar`: the week and month grids and the iCalendar feed;
* :mod:`webui.reservations.slurm`: Slurm's reservations, read through slurmrestd, made with ``scontrol``.
"""
