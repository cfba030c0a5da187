# SPDX-License-Identifier: GPL-3.0-or-later
"""Utilisation over time (issue 31): GPUs in use, idle and down, the queue, and GPUs in use by project, sampled by a
timer (``flask carme-tick``), kept a year with downsampling, drawn as charts for administrators and managers."""
