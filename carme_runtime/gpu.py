# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU facts and GPU isolation decisions (pure functions; file reads are separate and small).

* :func:`parse_nvidia_smi` parses
  ``nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits``.
* :func:`gres_conf_lines` turns those facts into ``gres.conf`` lines for the Slurm role's fact module.
* :func:`allocated_gpus` reads the GPUs slurmd allocated from a hook environment.
* :func:`find_job_devices_list` / :func:`check_devices_list` decide whether a job's cgroup-v1 device
  controller admits exactly its GPUs.

Assumption: the ``index`` nvidia-smi reports equals the minor number of ``/dev/nvidiaN`` (both follow PCI
order on a standard driver install); ``gres.conf`` and the cgroup check rely on it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from collections.abc import Mapping

NVIDIA_MAJOR = 195
NVIDIA_SMI_QUERY_ARGV = [
    "nvidia-smi",
    "--query-gpu=index,uuid,name,memory.total",
    "--format=csv,noheader,nounits",
]

#: verdicts of :func:`check_devices_list`
OK = "ok"
MISMATCH = "mismatch"
UNVERIFIABLE = "unverifiable"


class GpuFactsError(ValueError):
    """nvidia-smi output that cannot be parsed (the message names the line)."""


class GpuInfo:
    __slots__ = ("index", "memory_mib", "name", "uuid")

    def __init__(self, index: int, uuid: str, name: str, memory_mib: int) -> None:
        self.index = index
        self.uuid = uuid
        self.name = name
        self.memory_mib = memory_mib

    def __repr__(self) -> str:
        return f"GpuInfo({self.index}, {self.uuid!r}, {self.name!r}, memory_mib={self.memory_mib})"

    @property
    def gres_type(self) -> str:
        return gres_type_from_name(self.name)

    @property
    def device_file(self) -> str:
        return f"/dev/nvidia{self.index}"

    def as_dict(self) -> dict[str, object]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "memory_mib": self.memory_mib,
            "type": self.gres_type,
            "file": self.device_file,
        }


#: what a GRES type name keeps (the rest is dropped)
_GRES_TYPE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")


def gres_type_from_name(name: str) -> str:
    """``"NVIDIA A100-SXM4-80GB"`` -> ``"a100-sxm4-80gb"`` (lower case, vendor dropped, blanks -> ``_``).

    This follows the shape of the type names Slurm's NVML autodetection produces, so a site can switch
    between static gres.conf and ``AutoDetect=nvml`` without renaming types in job requests.
    """
    words = name.strip().lower().split()
    if words and words[0] == "nvidia":
        words = words[1:]
    gtype = "_".join(words)
    gtype = "".join(c for c in gtype if c in _GRES_TYPE_CHARS)
    return gtype or "gpu"


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """Parse the CSV (no header, no units) of :data:`NVIDIA_SMI_QUERY_ARGV`; sorted by index."""
    gpus: list[GpuInfo] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            raise GpuFactsError(f"line {lineno}: expected 4 fields (index,uuid,name,memory.total), got {line!r}")
        index_s, uuid, name, mem_s = fields
        if not index_s.isdigit():
            raise GpuFactsError(f"line {lineno}: index is not a number: {index_s!r}")
        if not uuid.startswith("GPU-"):
            raise GpuFactsError(f"line {lineno}: uuid does not look like GPU-...: {uuid!r}")
        try:
            memory = int(float(mem_s))
        except ValueError:
            raise GpuFactsError(f"line {lineno}: memory.total is not a number: {mem_s!r}") from None
        gpus.append(GpuInfo(int(index_s), uuid, name, memory))
    gpus.sort(key=lambda g: g.index)
    indexes = [g.index for g in gpus]
    if len(set(indexes)) != len(indexes):
        raise GpuFactsError("duplicate GPU index")
    return gpus


def fake_gpus(count: int, name: str = "Fake GPU", memory_mib: int = 16384) -> list[GpuInfo]:
    """The fake GPU backend for CI (no driver): ``count`` GPUs with deterministic UUIDs."""
    return [GpuInfo(i, f"GPU-00000000-0000-0000-0000-{i:012d}", name, memory_mib) for i in range(count)]


def gres_conf_lines(gpus: Iterable[GpuInfo], with_type: bool = True) -> list[str]:
    """One ``gres.conf`` line per GPU: ``Name=gpu Type=<type> File=/dev/nvidiaN``."""
    lines = []
    for gpu in gpus:
        if with_type:
            lines.append(f"Name=gpu Type={gpu.gres_type} File={gpu.device_file}")
        else:
            lines.append(f"Name=gpu File={gpu.device_file}")
    return lines


def gpu_facts(gpus: list[GpuInfo]) -> dict[str, object]:
    """The JSON document ``carme-gpu-facts`` prints (consumed by the Slurm role's fact module)."""
    types: dict[str, int] = {}
    for gpu in gpus:
        types[gpu.gres_type] = types.get(gpu.gres_type, 0) + 1
    gres = ",".join(f"gpu:{t}:{n}" for t, n in sorted(types.items()))
    return {
        "count": len(gpus),
        "gpus": [g.as_dict() for g in gpus],
        "gres_conf": gres_conf_lines(gpus),
        "node_gres": gres,  # for the NodeName=... Gres= field of slurm.conf
    }


def parse_index_list(value: str) -> tuple[int, ...] | None:
    """``"0,1"`` / ``"0-2,5"`` -> sorted indexes; ``None`` when not a list of numbers (UUIDs, NoDevFiles)."""
    value = value.strip()
    if value == "":
        return ()
    out: set[int] = set()
    for part in value.split(","):
        part = part.strip()
        if part.isdigit():
            out.add(int(part))
            continue
        lo, sep, hi = part.partition("-")
        if sep and lo.isdigit() and hi.isdigit() and int(lo) <= int(hi):
            out.update(range(int(lo), int(hi) + 1))
            continue
        return None
    return tuple(sorted(out))


def allocated_gpus(env: Mapping[str, str]) -> tuple[int, ...] | None:
    """Physical GPU indexes allocated to the job, from a prolog/epilog environment.

    ``SLURM_JOB_GPUS`` (prolog/epilog, batch) and ``SLURM_STEP_GPUS`` (steps) hold physical indexes;
    ``CUDA_VISIBLE_DEVICES`` is only used as a last resort because inside a job with ``ConstrainDevices``
    it is renumbered from 0 (in the prolog it still holds the physical indexes). Returns ``()`` for a job
    without GPUs, ``None`` when the variables are present but unparseable.
    """
    for key in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"):
        if key in env:
            return parse_index_list(env[key])
    return ()


def find_job_devices_list(cgroup_root: str, uid: int, job_id: int) -> str | None:
    """Path of the job's cgroup-v1 ``devices.list`` or ``None``.

    Slurm's cgroup/v1 plugin creates ``<root>/devices/slurm[_<node>]/uid_<uid>/job_<id>/``; several
    slurmd on one host (``slurmd -N n1``) give ``slurm_n1``, hence the glob over ``slurm*``.
    """
    base = os.path.join(cgroup_root, "devices")
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return None
    for entry in entries:
        if not entry.startswith("slurm"):
            continue
        candidate = os.path.join(base, entry, f"uid_{uid}", f"job_{job_id}", "devices.list")
        if os.path.exists(candidate):
            return candidate
    return None


def cgroup_version(cgroup_root: str) -> int:
    """2 when ``cgroup_root`` is a pure cgroup v2 (unified) mount, else 1 (v1 or hybrid)."""
    if os.path.exists(os.path.join(cgroup_root, "cgroup.controllers")):
        return 2
    return 1


class DeviceCheck:
    """Outcome of :func:`check_devices_list`: ``verdict`` is ``ok``, ``mismatch`` or ``unverifiable``."""

    __slots__ = ("allowed", "reason", "verdict")

    def __init__(self, verdict: str, reason: str, allowed: tuple[int, ...] | None = None) -> None:
        self.verdict = verdict
        self.reason = reason
        self.allowed = allowed

    def __repr__(self) -> str:
        return f"DeviceCheck({self.verdict!r}, {self.reason!r}, allowed={self.allowed})"


def check_devices_list(text: str, allocated: tuple[int, ...], all_gpus: Iterable[int] | None = None) -> DeviceCheck:
    """Decide whether a cgroup-v1 ``devices.list`` admits exactly the allocated ``/dev/nvidiaN``.

    ``devices.list`` only lists exceptions when the cgroup denies by default. When it reads
    ``a *:* rwm`` (allow by default), the kernel does not show the deny exceptions that Slurm's
    cgroup/v1 plugin writes for unallocated GPUs, so the file cannot tell; the answer is then
    ``unverifiable``, never a failure. (Measured on Slurm 22.05: the list read ``a *:* rwm`` while opens of
    unallocated GPUs were denied with EPERM.)

    ``all_gpus``: indexes of the node's GPUs, to report which extra GPUs a whitelist admits.
    """
    allowed: set[int] = set()
    all_195 = False
    for raw in text.splitlines():
        parts = raw.split()
        if not parts:
            continue
        if len(parts) != 3:
            return DeviceCheck(UNVERIFIABLE, f"unparseable devices.list line {raw!r}")
        kind, numbers, _access = parts
        if kind == "a":
            return DeviceCheck(UNVERIFIABLE, "cgroup allows all devices by default; deny exceptions are not listed")
        major, _, minor = numbers.partition(":")
        if kind == "c" and major in ("*", str(NVIDIA_MAJOR)):
            if minor == "*":
                all_195 = True
                continue
            if not minor.isdigit():
                return DeviceCheck(UNVERIFIABLE, f"unparseable devices.list line {raw!r}")
            n = int(minor)
            if n < 255:  # 195:255 is /dev/nvidiactl, 195:254 nvidia-modeset; not GPUs
                allowed.add(n)
    allowed.discard(254)
    want = set(allocated)
    if all_195:
        extra = sorted(set(all_gpus or ()) - want) if all_gpus is not None else ["*"]
        return DeviceCheck(MISMATCH, f"all /dev/nvidia* are allowed (extra: {extra})")
    got = tuple(sorted(allowed))
    if allowed == want:
        return DeviceCheck(OK, f"allowed GPUs {list(got)} == allocated", got)
    missing = sorted(want - allowed)
    extra_s = sorted(allowed - want)
    return DeviceCheck(
        MISMATCH, f"allocated {sorted(want)}, allowed {list(got)} (missing {missing}, extra {extra_s})", got
    )


def check_job_isolation(cgroup_root: str, uid: int, job_id: int, allocated: tuple[int, ...] | None) -> DeviceCheck:
    """Read the job's devices.list and decide (the only function here that touches the file system)."""
    if allocated is None:
        return DeviceCheck(UNVERIFIABLE, "allocated GPUs not parseable from the environment")
    if cgroup_version(cgroup_root) == 2:
        return DeviceCheck(UNVERIFIABLE, "cgroup v2: device access is an eBPF program, not a readable list")
    path = find_job_devices_list(cgroup_root, uid, job_id)
    if path is None:
        return DeviceCheck(UNVERIFIABLE, "no job devices cgroup found (ConstrainDevices off or not created yet)")
    try:
        with open(path, "rb") as fh:  # binary + decode: a text-mode open imports ``encodings.ascii``
            text = fh.read().decode("ascii")
    except OSError as exc:
        return DeviceCheck(UNVERIFIABLE, f"cannot read {path}: {exc.strerror}")
    return check_devices_list(text, allocated)
