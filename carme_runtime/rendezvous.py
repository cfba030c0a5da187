# SPDX-License-Identifier: GPL-3.0-or-later
"""Rendezvous variables of a session (multi-node sessions, issue 15): where the job's processes meet.

A session asks Slurm for N nodes with one task per node; the app (JupyterLab, code-server) runs in the batch step,
on the first node. Work started from the app's terminal or notebook reaches the other nodes with Slurm's own
launcher (``srun`` into the allocation, ``srun --mpi=pmix`` for MPI programs), never with ssh.

``carme-launch`` adds these variables to the app's environment, so they are in every terminal and notebook kernel
of the session and ``srun`` hands them on to every task:

* ``MASTER_ADDR``: the address of the first node (where the app and the launcher run; the node's address as the
  launcher binds the session front, reachable from the job's other nodes);
* ``MASTER_PORT``: a port that was free on that address when the session started, chosen per job;
* ``NNODES`` and ``WORLD_SIZE``: the number of nodes (one process per node; ``torchrun`` sets its own
  ``WORLD_SIZE`` from ``--nnodes`` x ``--nproc-per-node`` for its workers);
* ``CARME_NODES``: the job's node names, comma-separated, the first one first; ``CARME_MASTER_NODE`` the first.

A process's own rank is not a session variable: inside ``srun`` it is ``SLURM_PROCID`` (``SLURM_NODEID`` for the
node), which is what ``torch.distributed``'s ``env://`` needs as ``RANK``.
"""

from __future__ import annotations

from collections.abc import Mapping

from carme_runtime.hostlist import HostlistError
from carme_runtime.hostlist import expand_hostlist

#: the variables :func:`rendezvous_env` sets (documented in docs/portal.md "Multi-node sessions")
NAMES = ("MASTER_ADDR", "MASTER_PORT", "NNODES", "WORLD_SIZE", "CARME_NODES", "CARME_MASTER_NODE")


def job_nodes(env: Mapping[str, str]) -> list[str]:
    """The job's node names from Slurm's job environment (``SLURM_JOB_NODELIST``, hostlist syntax)."""
    try:
        return expand_hostlist(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"))
    except HostlistError:
        return []


def node_count(env: Mapping[str, str], nodes: list[str]) -> int:
    """``SLURM_JOB_NUM_NODES`` when Slurm set it, else the length of the node list (at least 1)."""
    raw = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or ""
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return max(1, len(nodes))


def rendezvous_env(env: Mapping[str, str], master_addr: str, master_port: int) -> dict[str, str]:
    """The rendezvous variables for a job whose environment is ``env``, meeting at ``master_addr:master_port``."""
    if not master_addr or any(c.isspace() for c in master_addr):
        raise ValueError(f"bad rendezvous address {master_addr!r}")
    if not 0 < master_port < 65536:
        raise ValueError(f"bad rendezvous port {master_port}")
    nodes = job_nodes(env)
    count = str(node_count(env, nodes))
    out = {"MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port), "NNODES": count, "WORLD_SIZE": count}
    if nodes:
        out["CARME_NODES"] = ",".join(nodes)
        out["CARME_MASTER_NODE"] = nodes[0]
    return out
