# SPDX-License-Identifier: GPL-3.0-or-later
"""Notifications (issue 31): session ready, failed, ending soon; a project's budget at 80 % and 100 %; an allocation
request decided. Shown in the portal (``/notifications``) and mailed where an SMTP relay is configured."""
