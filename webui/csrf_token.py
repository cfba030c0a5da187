"""``csrf_token()`` in the templates: Flask-WTF's token, signed without a compression attempt that never pays off.

Flask-WTF's ``generate_csrf()`` signs the session's raw token, 40 hex digits, with itsdangerous' URL-safe timed
serializer, which runs zlib on every payload and keeps the result only when it is more than a byte shorter. For a
42-byte JSON string of hex digits it never is (deflate's block and checksum overhead exceeds what 16 symbols can
save), yet the attempt, with the serializer built anew for each page, was most of the token's cost on each page.
Here the same payload is signed with the same key, salt, signer and timestamp, in the same format, once per request
(as Flask-WTF caches it in ``g``). A raw token of any other form, and a ``WTF_CSRF_FIELD_NAME`` of its own, go to
Flask-WTF itself. Checking tokens is Flask-WTF's alone (``CSRFProtect``), unchanged.
"""

from __future__ import annotations

import re
from typing import Any

from flask import current_app
from flask import g
from flask import session
from flask_wtf.csrf import generate_csrf  # type: ignore[import-untyped]
from itsdangerous import URLSafeTimedSerializer
from itsdangerous.encoding import base64_encode
from itsdangerous.serializer import Serializer

SALT = "wtf-csrf-token"  # Flask-WTF's
FIELD = "csrf_token"
RAW_TOKEN = re.compile(r"[0-9a-f]{40}")  # what generate_csrf() stores in the session: sha1(urandom(64)).hexdigest()


class _UncompressedSerializer(URLSafeTimedSerializer):
    def dump_payload(self, obj: Any) -> bytes:
        # URLSafeSerializerMixin.dump_payload when zlib does not shorten the payload: no "." prefix, plain base64
        return base64_encode(Serializer.dump_payload(self, obj))


_serializers: dict[Any, _UncompressedSerializer] = {}


def _serializer(secret_key: Any) -> _UncompressedSerializer:
    found = _serializers.get(secret_key)
    if found is None:
        found = _UncompressedSerializer(secret_key, salt=SALT)
        if len(_serializers) > 8:  # keys do not change in a running portal; tests make many apps
            _serializers.clear()
        _serializers[secret_key] = found
    return found


def csrf_token() -> str:
    """The signed CSRF token of this request, as ``flask_wtf.csrf.generate_csrf()`` returns it."""
    cached = g.get(FIELD)
    if cached is not None:
        return str(cached)
    config = current_app.config
    raw = session.get(FIELD)
    secret_key = config.get("WTF_CSRF_SECRET_KEY", current_app.secret_key)
    if config.get("WTF_CSRF_FIELD_NAME", FIELD) != FIELD or secret_key is None or not isinstance(raw, str):
        return str(generate_csrf())
    if not RAW_TOKEN.fullmatch(raw):
        return str(generate_csrf())
    token = _serializer(secret_key).dumps(raw)
    setattr(g, FIELD, token)
    return token
