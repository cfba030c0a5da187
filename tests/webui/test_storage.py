# SPDX-License-Identifier: GPL-3.0-or-later
"""Storage in the portal: declared datasets in the start form, the storage quota beside GPU-hours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Flask

from .conftest import log_in_as

STANDIN = str(Path(__file__).resolve().parents[1] / "fixtures" / "bin" / "beegfs-ctl")
DATASETS = [
    {
        "name": "demo-samples",
        "path": "/srv/datasets/demo-samples",
        "readonly": True,
        "description": "A <b>small</b> set",
    },
    {"name": "../etc", "path": "/etc", "readonly": True, "description": "never shown"},
]


def test_start_form_lists_the_declared_datasets(app: Flask, client: Any) -> None:
    app.config["DATASETS"] = DATASETS
    log_in_as(app, client, "alice")
    page = client.get("/sessions/new").get_data(as_text=True)
    assert 'data-dataset="demo-samples"' in page
    assert "<code>~/datasets/demo-samples</code> → <code>/srv/datasets/demo-samples</code> (read-only)" in page
    assert "A &lt;b&gt;small&lt;/b&gt; set" in page  # escaped, never markup
    assert "../etc" not in page and "never shown" not in page


def test_start_form_without_datasets_says_nothing_about_them(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    assert "Datasets in every session" not in client.get("/sessions/new").get_data(as_text=True)


def test_dashboard_says_quotas_are_not_available_without_beegfs(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    resp = client.get("/")
    assert resp.status_code == 200
    assert "Storage quotas are not available on this cluster." in resp.get_data(as_text=True)


def test_dashboard_shows_the_beegfs_quota_beside_gpu_hours(app: Flask, client: Any) -> None:
    app.config.update(STORAGE_QUOTA="beegfs", STORAGE_QUOTA_COMMAND=[STANDIN])
    log_in_as(app, client, "alice")
    page = client.get("/").get_data(as_text=True)
    assert "GPU-hours" in page
    assert "Storage: 1.5 GiB of 10.0 GiB (15 %);\n      1200 of 100000 files." in page


def test_dashboard_shows_unknown_when_beegfs_ctl_fails(app: Flask, client: Any) -> None:
    app.config.update(STORAGE_QUOTA="beegfs", STORAGE_QUOTA_COMMAND=[STANDIN])
    log_in_as(app, client, "carol")  # the stand-in knows no quota for carol and fails like beegfs-ctl
    resp = client.get("/")
    assert resp.status_code == 200
    assert "Storage used: unknown right now." in resp.get_data(as_text=True)
