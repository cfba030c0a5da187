# SPDX-License-Identifier: GPL-3.0-or-later
"""The landing page (``/``): my sessions, the cluster's GPUs, my quota and storage, the news, my nodes' health.

* :mod:`webui.dashboard.views`: the ``dashboard`` blueprint; :mod:`webui.dashboard.news`: the news it shows.
"""
