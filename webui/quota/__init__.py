# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU quota: each user's policy (their own row, the default row, the settings) and their GPU-hours this month.

Decisions (a session's start, a reservation's budget) read both fresh: :func:`webui.quota.policy.effective_policy`,
:func:`webui.quota.usage.gpu_hours_used`. Pages read them through the worker's caches (``cached=True``,
:func:`webui.quota.usage.quota_view`). No views of its own: the admin pages edit policies, the dashboard shows them.
"""
