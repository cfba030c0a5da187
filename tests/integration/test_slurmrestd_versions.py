# SPDX-License-Identifier: GPL-3.0-or-later
"""The slurmrestd adapter (carme_runtime.slurmrest) against the host's real Slurm 22.05 (``host_slurm``).

With ``SLURMRESTD_API_VERSION = "auto"`` (the default, as :func:`webui.slurm.client.make_client` builds it) the
portal's client asks slurmrestd which versions it offers and speaks v0.0.38; jobs, nodes, partitions and
reservations read through the adapter, and a session submitted through it runs. Slurm 24.11 is
tests/integration/test_slurmrestd_trixie.py.
"""

from __future__ import annotations

import pytest

from tests.fixtures.hostslurm import HostSlurm
from webui import settings
from webui.slurm.client import make_client
from webui.slurm.records import parse_job
from webui.slurm.records import parse_node
from webui.slurm.records import parse_partition

pytestmark = [pytest.mark.host, pytest.mark.slow]


def test_auto_finds_22_05s_version_and_reads_its_records(host_slurm: HostSlurm) -> None:
    config = {k: getattr(settings, k) for k in dir(settings) if k.isupper()}
    config |= {"SLURMRESTD_URL": host_slurm.restd_url, "SLURM_JWT_KEY_FILE": str(host_slurm.jwt_key)}
    assert config["SLURMRESTD_API_VERSION"] == "auto"
    client = make_client(config)
    assert client.api_for("alice").version == "v0.0.38"
    nodes = [parse_node(n) for n in client.nodes("alice")]
    assert [n.name for n in nodes] == [host_slurm.node] and nodes[0].gpus_total == host_slurm.gpus
    parts = [parse_partition(p) for p in client.partitions("alice")]
    assert parts and any(p.is_default for p in parts) and host_slurm.node in parts[0].nodes
    job_id = host_slurm.sbatch("alice", "sleep 30", "--gres=gpu:1", "--mem=100", "--time=5")
    try:
        jobs = {j.job_id: j for j in (parse_job(r) for r in client.jobs("alice"))}
        assert jobs[job_id].user == "alice" and jobs[job_id].gpus == 1 and jobs[job_id].time_limit_minutes == 5
        client.update_job("alice", job_id, {"time_limit": 4})  # a user may lower her own job's limit
        assert {parse_job(r).job_id: parse_job(r) for r in client.jobs("alice")}[job_id].time_limit_minutes == 4
    finally:
        client.cancel("alice", job_id)
    assert isinstance(client.reservations("alice"), list)
