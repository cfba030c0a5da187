# SPDX-License-Identifier: GPL-3.0-or-later
"""The history page (every session and job of the user, with why it ended and its log) and the dashboard's notices
of sessions that ended under the user (issue 30)."""
