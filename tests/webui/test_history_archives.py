# SPDX-License-Identifier: GPL-3.0-or-later
"""The history page's jobs from before the upgrade (webui/history/archives.py): gzipped ``sacct --json`` archives in
``HISTORY_ARCHIVE_DIR``, each user shown only their own, GPU-hours by the one rule; a broken archive is an error line.

The archives are real ``sacct --json --allusers --duplicates`` output (tests/fixtures/sacct/README.md): Slurm 22.05.8
(data_parser v0.0.38, from tests/integration/test_backup_restore.py's host cluster) and 24.11.5 (v0.0.42, from a
localhost/carme-node:debian13 container), each with alice's 1-GPU job and bob's CPU-only job.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from webui.history import archives

from .conftest import log_in_as

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "sacct"
RELEASES = {"22.05.8": "slurm-22.05.8-history.json", "24.11.5": "slurm-24.11.5-history.json"}


def sample(release: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SAMPLES / RELEASES[release]).read_text())
    return doc


def job_of(doc: dict[str, Any], user: str) -> dict[str, Any]:
    [job] = [j for j in doc["jobs"] if j["user"] == user]
    return job


def write(directory: Path, name: str, doc: dict[str, Any] | bytes) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_bytes(gzip.compress(json.dumps(doc).encode()) if isinstance(doc, dict) else doc)
    return path


def archived_section(page: str) -> str:
    """The archived jobs' sections of the history page."""
    return "".join(re.findall(r'<section class="archived">.*?</section>', page, re.S))


@pytest.fixture
def archive_dir(app: Flask, tmp_path: Path) -> Path:
    directory = tmp_path / "history"
    app.config["HISTORY_ARCHIVE_DIR"] = str(directory)
    archives._cache.clear()
    return directory


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_real_archives_read_with_gpu_hours_from_the_allocated_gpus(tmp_path: Path, release: str) -> None:
    doc = sample(release)
    archive = archives.read_archive(write(tmp_path, "a.json.gz", doc), 1 << 20)
    assert archive.label == f"Before the upgrade (Slurm {release})"
    [alice], [bob] = archive.jobs_by_user["alice"], archive.jobs_by_user["bob"]
    raw = job_of(doc, "alice")
    assert (alice.job_id, alice.state, alice.gpus) == (raw["job_id"], "COMPLETED", 1)
    assert alice.elapsed == raw["time"]["elapsed"] > 0
    assert alice.gpu_hours == pytest.approx(raw["time"]["elapsed"] / 3600)  # 1 GPU x its elapsed seconds
    assert (bob.user, bob.gpus, bob.gpu_hours) == ("bob", 0, 0.0)


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_alice_sees_her_archived_job_and_bob_does_not(
    app: Flask, client: FlaskClient, archive_dir: Path, release: str
) -> None:
    doc = sample(release)
    alice_job, bob_job = job_of(doc, "alice"), job_of(doc, "bob")
    alice_job["time"]["start"] = alice_job["time"]["end"] - 9000  # 2.5 h on one GPU: 2.50 GPU-hours
    alice_job["time"]["elapsed"] = 9000
    write(archive_dir, "slurm-history.json.gz", doc)
    log_in_as(app, client, "alice")
    resp = client.get("/history/")
    assert resp.status_code == 200
    section = archived_section(resp.get_data(as_text=True))
    assert f"Before the upgrade (Slurm {release})" in section
    row = re.search(rf'<tr data-job="{alice_job["job_id"]}">.*?</tr>', section, re.S)
    assert row is not None, section
    assert alice_job["name"] in row[0] and "Completed" in row[0] and "<td>2.50</td>" in row[0] and "2:30 h" in row[0]
    assert bob_job["name"] not in section and "/history/" + str(alice_job["job_id"]) not in section  # no log links
    log_in_as(app, client, "bob")
    section = archived_section(client.get("/history/").get_data(as_text=True))
    assert bob_job["name"] in section and alice_job["name"] not in section and "2.50" not in section


def test_a_user_without_archived_jobs_and_no_archives_see_no_section(
    app: Flask, client: FlaskClient, archive_dir: Path
) -> None:
    log_in_as(app, client, "carol")
    assert 'class="archived"' not in client.get("/history/").get_data(as_text=True)  # no directory yet: no error
    write(archive_dir, "slurm-history.json.gz", sample("22.05.8"))
    page = client.get("/history/").get_data(as_text=True)
    assert 'class="archived"' not in page and "before the upgrade is incomplete" not in page


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"not gzip at all", "Not a gzipped file"),
        (gzip.compress(b'{"jobs": [{"job_id": 1,'), "Expecting"),
        (gzip.compress(b'{"meta": {}}'), "not sacct --json output"),
        (gzip.compress(b'{"jobs": ["\xc3\x28"]}'), "can't decode"),
        (gzip.compress(b" " * 2048 + b"{}"), "larger than 1024 bytes unpacked"),
    ],
)
def test_a_broken_archive_is_an_error_line_and_the_page_still_answers(
    app: Flask,
    client: FlaskClient,
    archive_dir: Path,
    caplog: pytest.LogCaptureFixture,
    content: bytes,
    why: str,
) -> None:
    app.config["HISTORY_ARCHIVE_MAX_BYTES"] = 1024
    write(archive_dir, "a-broken.json.gz", content)
    log_in_as(app, client, "alice")
    with caplog.at_level(logging.ERROR):
        resp = client.get("/history/")
    assert resp.status_code == 200
    page = resp.get_data(as_text=True)
    [line] = re.findall(r'role="alert">The job history before the upgrade is incomplete: (.*?)</p>', page)
    assert line.startswith("archive a-broken.json.gz cannot be read: ") and why in line.replace("&#39;", "'"), line
    assert any("a-broken.json.gz cannot be read" in r.getMessage() for r in caplog.records)


def test_a_good_archive_beside_a_broken_one_is_still_shown(app: Flask, client: FlaskClient, archive_dir: Path) -> None:
    write(archive_dir, "a-broken.json.gz", b"\x1f\x8b truncated")
    write(archive_dir, "b-good.json.gz", sample("22.05.8"))
    log_in_as(app, client, "alice")
    page = client.get("/history/").get_data(as_text=True)
    assert "archive a-broken.json.gz cannot be read" in page
    assert job_of(sample("22.05.8"), "alice")["name"] in archived_section(page)


def test_each_archive_is_parsed_once_per_mtime_and_forgotten_when_gone(
    app: Flask, client: FlaskClient, archive_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    real = archives.read_archive

    def counting(path: Path, max_bytes: int, label: str = archives.DEFAULT_LABEL) -> archives.Archive:
        reads.append(path.name)
        return real(path, max_bytes, label)

    monkeypatch.setattr(archives, "read_archive", counting)
    path = write(archive_dir, "slurm-history.json.gz", sample("24.11.5"))
    log_in_as(app, client, "alice")
    for _ in range(3):
        assert client.get("/history/").status_code == 200
    assert reads == ["slurm-history.json.gz"]
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000_000))
    client.get("/history/")
    assert reads == ["slurm-history.json.gz"] * 2
    path.unlink()
    assert 'class="archived"' not in client.get("/history/").get_data(as_text=True)
    assert str(path) not in archives._cache
