"""The JSON API and nginx's ``auth_request`` endpoints: the ``api`` blueprint (:mod:`webui.api.views`, ``/api``)."""
