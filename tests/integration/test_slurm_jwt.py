# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's Slurm tokens against the real thing (``host_slurm``): slurmctld's ``scontrol token`` and slurmrestd.

* A token minted by ``scontrol token`` decodes with the cluster's key as Slurm checks them
  (:func:`tests.fixtures.slurm_jwt.decode_jwt`): same algorithm (HS256), same claims (``sun``, ``exp``).
* A token the portal mints (:func:`mint_jwt`, PyJWT) is accepted by the real slurmrestd, through the portal's client.
* Tokens Slurm refuses (expired, another algorithm, another key) are refused by that decoder as well.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import jwt
import pytest

from tests.fixtures.hostslurm import HostSlurm
from tests.fixtures.slurm_jwt import decode_jwt
from webui.slurm.client import API
from webui.slurm.client import SlurmClient
from webui.slurm.errors import SlurmError
from webui.slurm.jwt_tokens import TokenSource
from webui.slurm.jwt_tokens import mint_jwt

pytestmark = [pytest.mark.host, pytest.mark.slow]

USER = "alice"
REFUSED = (401, 403, 500)


def restd_status(cluster: HostSlurm, token: str, user: str = USER) -> int:
    request = urllib.request.Request(
        f"{cluster.restd_url}{API}/ping", headers={"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_scontrol_token_decodes_with_the_portals_decoder(host_slurm: HostSlurm) -> None:
    token = host_slurm.token(USER, lifespan=600)
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    claims = decode_jwt(host_slurm.jwt_key.read_bytes(), token)
    assert claims["sun"] == USER
    assert time.time() < claims["exp"] <= time.time() + 600 + 5
    assert restd_status(host_slurm, token) == 200  # and slurmrestd takes it, as the fixture's other tests rely on
    with pytest.raises(ValueError, match=r"[Ss]ignature"):
        decode_jwt(b"another key, 32 bytes long......", token)


def test_a_portal_token_is_accepted_by_slurmrestd(host_slurm: HostSlurm) -> None:
    key = host_slurm.jwt_key.read_bytes()
    token = mint_jwt(key, USER, lifetime=120)
    assert restd_status(host_slurm, token) == 200
    client = SlurmClient(host_slurm.restd_url, TokenSource(str(host_slurm.jwt_key), lifetime=120))
    assert isinstance(client.jobs(USER), list)
    pings = client.request("GET", f"{API}/ping", USER).get("pings")
    assert pings, "slurmrestd answered the ping without the controller's state"


def test_tokens_slurm_refuses_are_refused_by_the_portals_decoder(host_slurm: HostSlurm) -> None:
    key = host_slurm.jwt_key.read_bytes()
    now = int(time.time())
    expired = jwt.encode({"sun": USER, "iat": now - 600, "exp": now - 300}, key, algorithm="HS256")
    other_alg = jwt.encode({"sun": USER, "iat": now, "exp": now + 300}, key * 2, algorithm="HS512")
    other_key = mint_jwt(b"x" * 32, USER, lifetime=300)
    for token in (expired, other_alg, other_key):
        # slurmrestd 22.05 answers an authentication failure with 500 (or 401/403), never 200
        assert restd_status(host_slurm, token) in REFUSED, jwt.get_unverified_header(token)
        with pytest.raises(ValueError):
            decode_jwt(key, token)
    # the token names alice, the request another user: slurmrestd refuses, and so does the portal's client
    assert restd_status(host_slurm, mint_jwt(key, USER), user="bob") in REFUSED
    refused = SlurmClient(host_slurm.restd_url, TokenSource(str(host_slurm.jwt_key)))
    refused.tokens.token = lambda _user: other_key  # type: ignore[method-assign]
    with pytest.raises(SlurmError):
        refused.jobs(USER)
