# SPDX-License-Identifier: GPL-3.0-or-later
"""The job as slurmd describes it to a prolog/epilog: :class:`JobContext` built from the environment.

slurmd sets ``SLURM_JOB_ID``, ``SLURM_JOB_USER``, ``SLURM_JOB_UID``, ``SLURM_JOB_GPUS``,
``CUDA_VISIBLE_DEVICES``, ``SLURMD_NODENAME``, ``SLURM_JOB_PARTITION`` and ``SLURM_JOB_ACCOUNT`` for
``Prolog=``/``Epilog=`` (checked on Slurm 22.05.8). Plain class, no dataclasses: imported by the hooks.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

#: first field of the comment of a Carme session (``carme:v1;state=...``, :mod:`carme_runtime.slurm_formats`); here
#: rather than there because the hooks check it for every job and must not import the Slurm parsers to do so
COMMENT_PREFIX = "carme:v1"
#: job states in which a job holds resources on its nodes
ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING"})
#: job states of a job that has not finished: waiting for (or requeued to wait for) resources, or holding them
UNFINISHED_STATES = ACTIVE_STATES | {"PENDING", "REQUEUED"}
#: job states after which a job never runs again (squeue(1), "JOB STATE CODES"); a state in neither set (a hold Slurm
#: adds later, say) is neither unfinished nor ended
ENDED_STATES = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
)
#: what :func:`is_name` accepts, for messages (``re`` is not imported here: it costs the hooks about 4 ms per job)
NAME_PATTERN = "^[A-Za-z0-9_.-]+$"
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def is_name(text: str) -> bool:
    """``text`` matches :data:`NAME_PATTERN`: one or more ASCII letters, digits, ``_``, ``.`` or ``-``."""
    return bool(text) and _NAME_CHARS.issuperset(text)


class InvalidJobEnv(ValueError):
    """The hook environment does not describe a job (missing or malformed variable)."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable
        self.message = message


def _env_int(env: Mapping[str, str], name: str) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        raise InvalidJobEnv(name, "missing")
    if not raw.isascii() or not raw.isdigit():
        raise InvalidJobEnv(name, f"not a non-negative integer: {raw[:40]!r}")
    return int(raw)


class JobContext:
    __slots__ = ("account", "gpus_env", "job_id", "node", "partition", "uid", "user")

    job_id: int
    user: str
    uid: int
    node: str
    partition: str
    account: str
    gpus_env: dict[str, str]

    def __init__(
        self,
        job_id: int,
        user: str,
        uid: int,
        node: str = "",
        partition: str = "",
        account: str = "",
        gpus_env: dict[str, str] | None = None,
    ) -> None:
        self.job_id = job_id
        self.user = user
        self.uid = uid
        self.node = node
        self.partition = partition
        self.account = account
        self.gpus_env = dict(gpus_env or {})

    def __repr__(self) -> str:
        return f"JobContext(job_id={self.job_id}, user={self.user!r}, uid={self.uid}, node={self.node!r})"

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> JobContext:
        """Parse the hook environment; raise :class:`InvalidJobEnv` naming the bad variable."""
        job_id = _env_int(env, "SLURM_JOB_ID")
        if job_id == 0:
            raise InvalidJobEnv("SLURM_JOB_ID", "must be > 0")
        user = env.get("SLURM_JOB_USER", "")
        if not user:
            raise InvalidJobEnv("SLURM_JOB_USER", "missing")
        if not is_name(user):
            raise InvalidJobEnv("SLURM_JOB_USER", f"not a valid user name: {user[:40]!r}")
        uid = _env_int(env, "SLURM_JOB_UID")
        node = env.get("SLURMD_NODENAME", "")
        if node and not is_name(node):
            raise InvalidJobEnv("SLURMD_NODENAME", f"not a valid node name: {node[:40]!r}")
        gpus_env = {k: env[k] for k in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES") if k in env}
        return cls(
            job_id=job_id,
            user=user,
            uid=uid,
            node=node,
            partition=env.get("SLURM_JOB_PARTITION", ""),
            account=env.get("SLURM_JOB_ACCOUNT", ""),
            gpus_env=gpus_env,
        )
