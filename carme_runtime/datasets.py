# SPDX-License-Identifier: GPL-3.0-or-later
"""Datasets in sessions: the admin declares them (inventory ``carme_datasets`` -> runtime.json ``datasets``, name ->
path); every session finds them under ``~/datasets/<name>`` (a symbolic link) and ``$CARME_DATASETS_DIR``, and an
Apptainer session gets each path bound read-only at the same place.

Read-only is the file system's job, never this module's: a dataset is root-owned and not writable by users (the
storage roles create it so), or mounted read-only (``beegfs_client_bind_mounts`` with ``readonly: true``). The links
only make the datasets easy to find.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

ENV_VAR = "CARME_DATASETS_DIR"
LINK_DIR = "datasets"


def links_dir(home: str) -> str:
    return os.path.join(home, LINK_DIR)


def session_env(home: str, datasets: Mapping[str, str]) -> dict[str, str]:
    return {ENV_VAR: links_dir(home)} if datasets else {}


def link_datasets(home: str, datasets: Mapping[str, str]) -> list[str]:
    """Make ``~/datasets/<name>`` point at each dataset; return one note per link that could not be made.

    A link that already points elsewhere is replaced; a real file or directory of that name is left alone (it is the
    user's) and noted. Runs as the job's user.
    """
    if not datasets:
        return []
    notes = []
    base = links_dir(home)
    try:
        os.makedirs(base, mode=0o755, exist_ok=True)
    except OSError as exc:
        return [f"cannot create {base}: {exc.strerror}"]
    for name, target in sorted(datasets.items()):
        link = os.path.join(base, name)
        try:
            if os.path.islink(link):
                if os.readlink(link) == target:
                    continue
                os.unlink(link)
            elif os.path.lexists(link):
                notes.append(f"{link} exists and is not a link: dataset {name} is at {target}")
                continue
            os.symlink(target, link)
        except OSError as exc:
            notes.append(f"cannot link {link} -> {target}: {exc.strerror}")
    return notes
