# SPDX-License-Identifier: GPL-3.0-or-later
"""Node-side configuration of the runtime.

Read from ``/etc/carme/runtime.json`` (path overridable with ``CARME_CONFIG``; rendered by the
``carme_runtime`` role), then overridden by a few environment variables. JSON rather than TOML on purpose:
this module is imported by the prolog/epilog, and ``json`` imports in about 2 ms where ``tomllib``
takes 10 ms.
A missing file means built-in defaults.

This module avoids ``typing`` and ``dataclasses`` at runtime for the same reason.
"""

from __future__ import annotations

import os

from carme_runtime.job import is_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_CONFIG_PATH = "/etc/carme/runtime.json"

#: key -> (type, default); lists are lists of str
_SCHEMA: dict[str, tuple[type, object]] = {
    "log_dir": (str, "/var/log/carme"),
    "scratch_root": (str, "/scratch"),
    "scratch_pattern": (str, "{job_id}"),
    "cgroup_root": (str, "/sys/fs/cgroup"),
    "gpu_check": (str, "enforce"),  # enforce | warn | off
    "kill_leftovers": (bool, True),
    "min_uid": (int, 1000),
    "dataset_dirs": (list, []),
    "bind_address": (str, ""),  # "" = the address of the node's hostname
    "apps_dirs": (list, ["/etc/carme/apps.d"]),
    "runtime": (str, "apptainer"),  # apptainer | charliecloud | none
    "env_prefix": (str, ""),  # NoneRuntime: venv/conda prefix
    # ch-run's version (the carme_runtime role writes it where ch-run is newer than 0.31: runtimes.CharliecloudRuntime)
    "charliecloud_version": (str, "0.31"),
    "ready_timeout_s": (int, 300),
    # Datasets bound into sessions: name -> absolute path (read-only; rendered from the inventory's carme_datasets).
    "datasets": (dict, {}),
    # BeeOND per job (carme_runtime/beeond.py): off unless the node has a local disk for it.
    "beeond": (bool, False),
    "beeond_feature": (str, "beeond"),
    "beeond_bin": (str, "beeond"),
    "beeond_data_root": (str, "/local/beeond"),
    "beeond_mount_root": (str, "/mnt/beeond"),
    "beeond_state_dir": (str, "/var/lib/carme/beeond"),
    "beeond_timeout_s": (int, 300),
    # Which jobs the prolog/epilog act on (hooks.py): "carme" = Carme's sessions and jobs that ask for a Carme feature
    # (BeeOND); every other job passes through untouched. "all" = every job (a cluster only Carme schedules on).
    "hooks_scope": (str, "carme"),
}

_ENV_OVERRIDES = {
    "CARME_LOG_DIR": "log_dir",
    "CARME_SCRATCH_ROOT": "scratch_root",
    "CARME_CGROUP_ROOT": "cgroup_root",
    "CARME_GPU_CHECK": "gpu_check",
    "CARME_BIND_ADDRESS": "bind_address",
}

GPU_CHECK_MODES = ("enforce", "warn", "off")
HOOK_SCOPES = ("carme", "all")


def is_dataset_name(name: str) -> bool:
    """A dataset's name: also a file name (``~/datasets/<name>``), so at most 64 of letters, digits, ``_``, ``.``,
    ``-``, and not ``.`` or ``..``."""
    return is_name(name) and len(name) <= 64 and name not in (".", "..")


def _starts_with_major_minor(version: str) -> bool:
    """``version`` starts with ``MAJOR.MINOR`` (digits, a dot, digits), as ``ch-run --version`` prints it."""
    major, dot, rest = version.partition(".")
    return bool(dot) and major.isascii() and major.isdigit() and rest[:1].isascii() and rest[:1].isdigit()


class ConfigError(ValueError):
    """Invalid runtime configuration; the message names the source and the key."""


class RuntimeConfig:
    """Validated configuration values. Build it with :meth:`load` or :meth:`from_mapping`."""

    __slots__ = (
        "apps_dirs",
        "beeond",
        "beeond_bin",
        "beeond_data_root",
        "beeond_feature",
        "beeond_mount_root",
        "beeond_state_dir",
        "beeond_timeout_s",
        "bind_address",
        "cgroup_root",
        "charliecloud_version",
        "dataset_dirs",
        "datasets",
        "env_prefix",
        "gpu_check",
        "hooks_scope",
        "kill_leftovers",
        "log_dir",
        "min_uid",
        "ready_timeout_s",
        "runtime",
        "scratch_pattern",
        "scratch_root",
    )

    log_dir: str
    scratch_root: str
    scratch_pattern: str
    cgroup_root: str
    gpu_check: str
    kill_leftovers: bool
    min_uid: int
    dataset_dirs: list[str]
    bind_address: str
    apps_dirs: list[str]
    runtime: str
    env_prefix: str
    charliecloud_version: str
    ready_timeout_s: int
    datasets: dict[str, str]
    beeond: bool
    beeond_feature: str
    beeond_bin: str
    beeond_data_root: str
    beeond_mount_root: str
    beeond_state_dir: str
    beeond_timeout_s: int
    hooks_scope: str

    def __init__(self, **values: object) -> None:
        for key, (_typ, default) in _SCHEMA.items():
            value = values.pop(key, default)
            if isinstance(value, list):
                value = list(value)
            elif isinstance(value, dict):
                value = dict(value)
            setattr(self, key, value)
        if values:
            raise ConfigError(f"unknown configuration key(s): {', '.join(sorted(values))}")

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={getattr(self, k)!r}" for k in _SCHEMA)
        return f"RuntimeConfig({inner})"

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], source: str = "<dict>") -> RuntimeConfig:
        checked: dict[str, object] = {}
        for key, value in data.items():
            if key not in _SCHEMA:
                raise ConfigError(f"{source}: unknown key {key!r}")
            typ, _default = _SCHEMA[key]
            if typ is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{source}: {key} must be an integer")
            if typ is bool and not isinstance(value, bool):
                raise ConfigError(f"{source}: {key} must be true or false")
            if typ is str and not isinstance(value, str):
                raise ConfigError(f"{source}: {key} must be a string")
            if typ is list and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise ConfigError(f"{source}: {key} must be a list of strings")
            if typ is dict and not (
                isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
            ):
                raise ConfigError(f"{source}: {key} must be an object of strings")
            checked[key] = value
        cfg = cls(**checked)
        cfg.check(source)
        return cfg

    def check(self, source: str) -> None:
        if self.gpu_check not in GPU_CHECK_MODES:
            raise ConfigError(f"{source}: gpu_check must be one of {', '.join(GPU_CHECK_MODES)}")
        if self.hooks_scope not in HOOK_SCOPES:
            raise ConfigError(f"{source}: hooks_scope must be one of {', '.join(HOOK_SCOPES)}")
        if self.runtime not in ("apptainer", "charliecloud", "none"):
            raise ConfigError(f"{source}: runtime must be 'apptainer', 'charliecloud' or 'none'")
        if not _starts_with_major_minor(self.charliecloud_version):
            raise ConfigError(f"{source}: charliecloud_version must start with MAJOR.MINOR (ch-run --version)")
        paths = ("log_dir", "scratch_root", "cgroup_root", "beeond_data_root", "beeond_mount_root", "beeond_state_dir")
        for key in paths:
            if not os.path.isabs(getattr(self, key)):
                raise ConfigError(f"{source}: {key} must be an absolute path")
        for path in self.dataset_dirs:
            if not os.path.isabs(path):
                raise ConfigError(f"{source}: dataset_dirs entry {path!r} must be an absolute path")
        for name, path in self.datasets.items():
            if not is_dataset_name(name):
                raise ConfigError(f"{source}: dataset name {name!r} must be letters, digits, '.', '_' or '-'")
            if not os.path.isabs(path):
                raise ConfigError(f"{source}: dataset {name} path {path!r} must be an absolute path")
        if self.beeond_timeout_s <= 0:
            raise ConfigError(f"{source}: beeond_timeout_s must be positive")

    def all_dataset_dirs(self) -> list[str]:
        """Every dataset directory bound read-only into sessions: ``dataset_dirs`` and the named ``datasets``."""
        out = list(self.dataset_dirs)
        out += [p for p in self.datasets.values() if p not in out]
        return out

    @classmethod
    def load(cls, env: Mapping[str, str], path: str | None = None) -> RuntimeConfig:
        """Defaults, then the JSON file (if it exists), then ``CARME_*`` environment overrides."""
        path = path or env.get("CARME_CONFIG") or DEFAULT_CONFIG_PATH
        data: dict[str, object] = {}
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except FileNotFoundError:
            text = ""
        except OSError as exc:
            raise ConfigError(f"{path}: {exc.strerror}") from exc
        if text.strip():
            import json

            try:
                loaded = json.loads(text)
            except ValueError as exc:
                raise ConfigError(f"{path}: invalid JSON: {exc}") from exc
            if not isinstance(loaded, dict):
                raise ConfigError(f"{path}: top level must be an object")
            data.update(loaded)
        for var, key in _ENV_OVERRIDES.items():
            if env.get(var):
                data[key] = env[var]
        return cls.from_mapping(data, source=path)
