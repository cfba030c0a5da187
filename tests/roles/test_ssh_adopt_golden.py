# SPDX-License-Identifier: GPL-3.0-or-later
"""Golden files: the slurm_ssh_adopt role's PAM files for the example inventory, and its Slurm checks.

Rendered through real ansible (tests/roles/render_ssh_adopt.yml) with ``slurm_ssh_adopt_admin_groups:
[carme-admins]`` and a Debian 12 common-session that has pam_sss, pam_systemd and pam_mkhomedir
(tests/roles/golden/ssh_adopt/common-session.in), compared byte for byte with tests/roles/golden/example/ssh_adopt/.
After an intended template change: ``CARME_UPDATE_GOLDEN=1 pytest tests/roles/test_ssh_adopt_golden.py``, then review
the diff. tests/integration/test_ssh_adopt.py runs the same templates in a real sshd against a real Slurm.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.fixtures.golden import assert_golden
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env

GOLDEN = Path(__file__).parent / "golden" / "example" / "ssh_adopt"
COMMON_SESSION = Path(__file__).parent / "golden" / "ssh_adopt" / "common-session.in"
PLAYBOOK = REPO_ROOT / "tests" / "roles" / "render_ssh_adopt.yml"
FILES = ("etc/pam.d/sshd", "etc/pam.d/common-session-slurm-adopt", "etc/security/access-slurm-adopt.conf")
ADMINS = {"slurm_ssh_adopt_admin_groups": ["carme-admins"]}


def play(out: Path, variables: Mapping[str, object], *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [_ansible_bin("ansible-playbook"), str(PLAYBOOK), "-i", str(REPO_ROOT / "inventories" / "example")]
    argv += ["-e", f"out_dir={out}", "-e", "ansible_connection=local", "-e", f"common_session_file={COMMON_SESSION}"]
    argv += ["-e", json.dumps(variables), *extra]
    return subprocess.run(argv, cwd=REPO_ROOT, env=ansible_env(), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ssh_adopt")
    proc = play(out, ADMINS)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return out


@pytest.mark.parametrize("name", FILES)
def test_matches_golden(rendered: Path, name: str) -> None:
    assert_golden((rendered / name).read_text(), GOLDEN / name, name)


def stack(text: str, kind: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.split()[:1] in ([kind], [f"-{kind}"])]


def test_account_stack_admins_then_slurm_adopt_last(rendered: Path) -> None:
    account = stack((rendered / "etc/pam.d/sshd").read_text(), "account")
    assert account[-2] == "account sufficient pam_access.so accessfile=/etc/security/access-slurm-adopt.conf"
    assert account[-1].startswith("account required pam_slurm_adopt.so ")  # last, no "-": a missing module refuses
    options = account[-1].split()[3:]
    assert options == [
        "action_no_jobs=deny",
        "action_unknown=newest",
        "action_adopt_failure=deny",
        "action_generic_failure=deny",
    ]
    access = [line for line in (rendered / "etc/security/access-slurm-adopt.conf").read_text().splitlines()]
    assert [line for line in access if not line.startswith("#")] == ["+:root:ALL", "+:(carme-admins):ALL", "-:ALL:ALL"]


def test_pam_systemd_only_out_of_sshd_session(rendered: Path) -> None:
    sshd = (rendered / "etc/pam.d/sshd").read_text()
    assert "@include common-session-slurm-adopt" in sshd and "@include common-session\n" not in sshd
    copy = (rendered / "etc/pam.d/common-session-slurm-adopt").read_text()
    assert "pam_systemd" not in "\n".join(stack(copy, "session"))
    # pam_permit in its place: the primary block's [default=1] jump and the later modules are unchanged
    source = stack(COMMON_SESSION.read_text(), "session")
    assert stack(copy, "session") == [
        "session optional pam_permit.so" if "pam_systemd" in line else line for line in source
    ]


def test_private_service_name_passes_service_option(tmp_path: Path) -> None:
    proc = play(
        tmp_path, {"slurm_ssh_adopt_pam_service": "sshd-test", "slurm_ssh_adopt_options": {"log_level": "debug"}}
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    account = stack((tmp_path / "etc/pam.d/sshd-test").read_text(), "account")
    assert account[-1].endswith("action_generic_failure=deny service=sshd-test log_level=debug")


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({}, "slurm_config.PrologFlags"),  # the example inventory has PrologFlags: Alloc
        (
            {"slurm_config": {"PrologFlags": "Alloc,Contain"}, "slurm_proctrack_type": "proctrack/linuxproc"},
            "slurm_proctrack_type",
        ),
        ({"slurm_config": {"PrologFlags": "Alloc,Contain"}, "slurm_task_plugin": "task/affinity"}, "slurm_task_plugin"),
        ({"slurm_config": {"PrologFlags": "alloc, contain"}}, None),
    ],
)
def test_slurm_checks(tmp_path: Path, variables: dict[str, object], message: str | None) -> None:
    proc = play(tmp_path, variables, "-e", "ssh_adopt_tasks=assert")
    if message is None:
        assert proc.returncode == 0, proc.stdout[-4000:]
    else:
        assert proc.returncode != 0 and message in proc.stdout, proc.stdout[-4000:]
