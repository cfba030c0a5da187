"""Filters of the ldap_server role."""

from __future__ import annotations

import base64
import hashlib
import hmac


def ldap_ssha(password: str, seed: str) -> str:
    """{SSHA} hash of password with a salt derived from seed and the password.

    The salt is deterministic so that the value written to cn=config stays the same from run to run (idempotence);
    it differs for every password and every seed (the DN), which is what a salt is for here.
    """
    pw = str(password).encode()
    salt = hmac.new(str(seed).encode(), pw, hashlib.sha256).digest()[:8]
    return "{SSHA}" + base64.b64encode(hashlib.sha1(pw + salt).digest() + salt).decode()


class FilterModule:
    def filters(self):
        return {"ldap_ssha": ldap_ssha}
