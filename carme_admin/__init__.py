# SPDX-License-Identifier: GPL-3.0-or-later
"""The admin CLI (`carme`): runs the project's playbooks through ansible-runner (the ``admin`` extra).

Only the admin machine needs it; nothing here is imported by the node runtime.
"""
