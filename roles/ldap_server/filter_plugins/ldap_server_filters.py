# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the ldap_server role."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re

from ansible.errors import AnsibleFilterError

#: A DNS host name (labels of letters, digits and hyphens); what ldap_server_password_auth_peers may hold besides
#: IP addresses and CIDRs.
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?")


def ldap_ssha(password: str, seed: str) -> str:
    """{SSHA} hash of password with a salt derived from seed and the password.

    The salt is deterministic so that the value written to cn=config stays the same from run to run (idempotence);
    it differs for every password and every seed (the DN), which is what a salt is for here.
    """
    pw = str(password).encode()
    salt = hmac.new(str(seed).encode(), pw, hashlib.sha256).digest()[:8]
    return "{SSHA}" + base64.b64encode(hashlib.sha1(pw + salt).digest() + salt).decode()


def _network(entry: object) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(str(entry).strip(), strict=False)
    except ValueError:
        return None


def ldap_peer_names(entries: list[object]) -> list[str]:
    """The host names among the password peers (to be resolved on the server); fails on an entry that is neither an
    IP address, a CIDR nor a host name."""
    names: list[str] = []
    for entry in entries:
        text = str(entry).strip()
        if _network(text) is not None:
            continue
        if "/" in text or not _HOST_NAME.fullmatch(text):
            raise AnsibleFilterError(
                f"ldap_server_password_auth_peers: {entry!r} is not an IP address, a CIDR or a host name"
            )
        names.append(text)
    return names


def ldap_peername(entry: object) -> str:
    """slapd's peername clause for an IP address or CIDR: peername.ip=10.1.0.0%255.255.0.0, peername.ipv6=::1.

    slapd takes a netmask after '%', not a prefix length; a single address gets no mask. An IPv4-mapped IPv6
    network is written as IPv4, which is how slapd (IPV6_V6ONLY sockets) sees such a client.
    """
    network = _network(entry)
    if network is None:
        raise AnsibleFilterError(f"ldap_server_password_auth_peers: {entry!r} is not an IP address or a CIDR")
    if isinstance(network, ipaddress.IPv6Network) and network.network_address.ipv4_mapped and network.prefixlen >= 96:
        network = ipaddress.IPv4Network((network.network_address.ipv4_mapped, network.prefixlen - 96))
    style = "ip" if network.version == 4 else "ipv6"
    mask = "" if network.prefixlen == network.max_prefixlen else f"%{network.netmask}"
    return f"peername.{style}={network.network_address}{mask}"


def ldap_auth_clauses(entries: list[object]) -> list[str]:
    """One ACL clause per peer that lets an anonymous connection from it authenticate (a simple bind)."""
    clauses = [f"by {ldap_peername(entry)} anonymous auth" for entry in entries]
    return list(dict.fromkeys(clauses))


class FilterModule:
    def filters(self):
        return {
            "ldap_ssha": ldap_ssha,
            "ldap_peer_names": ldap_peer_names,
            "ldap_peername": ldap_peername,
            "ldap_auth_clauses": ldap_auth_clauses,
        }
