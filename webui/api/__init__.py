# SPDX-License-Identifier: GPL-3.0-or-later
"""The JSON API and nginx's ``auth_request`` endpoints: the ``api`` blueprint (:mod:`webui.api.views`, ``/api``)."""
