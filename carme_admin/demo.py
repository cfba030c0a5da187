# SPDX-License-Identifier: GPL-3.0-or-later
"""The embedded demo cluster: three podman containers (head, node1, node2) on this host."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import TextIO

from carme_runtime.command_runner import SubprocessRunner

DEMO_INVENTORY = Path("inventories/demo/hosts.yml")
DEMO_PLAYBOOK = "playbooks/demo_nodes.yml"
DEMO_LABEL = "carme.demo=true"
DEMO_NODES = ("carme-demo-head", "carme-demo-node1", "carme-demo-node2")
HEAD = "carme-demo-head"
#: CARME_RELEASE (the one variable that picks the demo's Debian release) -> the node image's tag (images/node/build.sh)
RELEASE_TAGS = {"bookworm": "debian12", "trixie": "debian13"}
#: the default release, named once for the scripts, the Makefile and this module (images/node/default-release)
DEFAULT_RELEASE_FILE = Path(__file__).resolve().parent.parent / "images/node/default-release"
#: podman --security-opt for the demo nodes per release: Apptainer (Debian 13 nodes) mounts a fresh /proc in a user
#: namespace, which the kernel refuses while podman masks parts of /proc; nothing more privileged than the unmask.
#: The Debian 12 demo has it too: it is where `carme upgrade` starts, and its nodes upgraded in place keep the options
#: they were created with (docs/upgrade.md "Upgrade path")
RELEASE_SECURITY_OPTS: dict[str, tuple[str, ...]] = {"bookworm": ("unmask=ALL",), "trixie": ("unmask=ALL",)}
DEFAULT_HTTPS_PORT = 8443
DEFAULT_APPS_PORT = 8444
SECRETS_DIR = ".secrets/demo/"
DEMO_ID_FILE = "demo-id"
WHEELHOUSE = ".cache/wheelhouse"  # scripts/wheelhouse.sh links it; the demo inventory mounts it into every node
FACT_CACHE = ".cache/facts"  # ansible.cfg: fact_caching = jsonfile, kept an hour, with gathering = smart
ID_LABEL = "carme.demo_id"  # which checkout's secrets the containers were deployed with
OWNER_LABEL = "carme.demo_secrets"  # that checkout's secrets dir
CMD_TIMEOUT = 60

CmdRunner = Callable[[Sequence[str]], tuple[int, str, str]]


#: runs an argv list (never a shell); a missing program or a timeout is rc 127/124, not an exception
run_cmd: CmdRunner = SubprocessRunner(timeout=CMD_TIMEOUT)


# -- inventory values --------------------------------------------------------------------------------------
def _load_yaml(path: Path) -> Any:
    import yaml  # lazy: admin extra

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None


def _var_files(inventory: Path, host: str) -> list[Path]:
    """Files that can set a variable for ``host`` in a YAML inventory, lowest precedence first."""
    base = inventory.parent
    files: list[Path] = []
    for kind, name in (("group_vars", "all"), ("host_vars", host)):
        for candidate in (base / kind / name, base / kind / f"{name}.yml", base / kind / f"{name}.yaml"):
            if candidate.is_dir():
                files += sorted(p for p in candidate.iterdir() if p.suffix in (".yml", ".yaml"))
            elif candidate.is_file():
                files.append(candidate)
    return files


def inventory_var(inventory: Path, name: str, host: str = "localhost") -> Any:
    """The raw (untemplated) value of a variable set in the inventory for ``host``, or None.

    Good enough for literal settings such as the demo's published port; templated values are returned as
    the template string (callers fall back to the default)."""
    value: Any = None
    doc = _load_yaml(inventory)
    if isinstance(doc, Mapping):
        all_group = doc.get("all")
        all_vars = all_group.get("vars") if isinstance(all_group, Mapping) else None
        if isinstance(all_vars, Mapping) and name in all_vars:
            value = all_vars[name]
    for path in _var_files(inventory, host):
        data = _load_yaml(path)
        if isinstance(data, Mapping) and name in data:
            value = data[name]
    return value


def https_port(inventory: Path) -> int:
    value = inventory_var(inventory, "demo_nodes_https_port")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return DEFAULT_HTTPS_PORT


def apps_port(inventory: Path) -> int:
    value = inventory_var(inventory, "demo_nodes_apps_port")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return DEFAULT_APPS_PORT


def default_release() -> str:
    return DEFAULT_RELEASE_FILE.read_text(encoding="utf-8").strip()


def release(env: Mapping[str, str] | None = None) -> str:
    """The demo's Debian release from CARME_RELEASE (the default release when unset); ValueError for an unknown one."""
    value = (os.environ if env is None else env).get("CARME_RELEASE", "").strip() or default_release()
    if value not in RELEASE_TAGS:
        raise ValueError(f"CARME_RELEASE must be one of {', '.join(sorted(RELEASE_TAGS))}, not {value!r}")
    return value


def release_image(env: Mapping[str, str] | None = None) -> str:
    """The node image of the release CARME_RELEASE names (CARME_NODE_IMAGE, when set, names it outright)."""
    explicit = (os.environ if env is None else env).get("CARME_NODE_IMAGE", "").strip()
    return explicit or f"localhost/carme-node:{RELEASE_TAGS[release(env)]}"


def node_image(inventory: Path, env: Mapping[str, str] | None = None) -> str:
    """The inventory's demo_nodes_image when it sets a literal one, else the release's image."""
    value = inventory_var(inventory, "demo_nodes_image")
    return value if isinstance(value, str) and value and "{{" not in value else release_image(env)


def clear_fact_cache(project: Path) -> None:
    """Forget Ansible's cached facts: new demo nodes are other machines under the old names (of another release,
    perhaps), and with ``gathering = smart`` the roles would be fed the old ones' facts for up to an hour."""
    cache = project / FACT_CACHE
    for entry in cache.iterdir() if cache.is_dir() else ():
        if entry.is_file():
            entry.unlink()


def node_vars(inventory: Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Extra variables for playbooks/demo_nodes.yml: the release's image and its podman security options."""
    return {
        "demo_nodes_image": node_image(inventory, env),
        "demo_nodes_security_opt": list(RELEASE_SECURITY_OPTS[release(env)]),
    }


# -- checks before `demo up` -------------------------------------------------------------------------------
def preflight(
    image: str,
    runner: CmdRunner = run_cmd,
    which: Callable[[str], str | None] = shutil.which,
    wheelhouse: Path | None = None,
) -> str:
    """Empty when the demo can be created, else what to do first."""
    if which("podman") is None:
        return "podman is not installed: install podman (and runc), see docs / .ci/run"
    rc, _out, err = runner(["podman", "image", "exists", image])
    if rc == 1:
        return f"the node image {image} does not exist: build it with `make image` (images/node/build.sh)"
    if rc != 0:
        return f"podman cannot check the image {image}: {err.strip() or f'rc={rc}'}"
    if wheelhouse is not None and not wheelhouse.is_dir():
        return f"the wheelhouse {wheelhouse} does not exist: build it with `make wheelhouse` (scripts/wheelhouse.sh)"
    return ""


def login_hints(port: int, apps_port: int = DEFAULT_APPS_PORT) -> list[str]:
    return [
        "The demo cluster is up.",
        f"  Portal:   https://127.0.0.1:{port}/   (certificate signed by the demo CA in {SECRETS_DIR}ldap-ca/)",
        f"  Apps:     https://<job>-<tag>.apps.localhost:{apps_port}/  (each session on an origin of its own)",
        f"  Log in:   alice, bob (users) or carol (admin); initial passwords in {SECRETS_DIR}initial-passwords/<user>;",
        "            the first login enrols TOTP (scan the QR code or type the key into an authenticator app)",
        f"  Shell:    podman exec -it {HEAD} bash",
        "  Slurm:    sinfo   (inside the head: nodes node1, node2 should be idle)",
        f"  Secrets:  {SECRETS_DIR}  (generated passwords and keys, root-only)",
        "  Status:   carme demo status      Remove: carme demo down",
    ]


# -- `demo status` -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # podman's container state, or "missing"
    systemd: str  # `systemctl is-system-running`, "-" when the container is not running

    @property
    def healthy(self) -> bool:
        return self.state == "running" and self.systemd == "running"


def _container_name(entry: Mapping[str, Any]) -> str:
    names = entry.get("Names")
    if isinstance(names, list) and names:
        return str(names[0])
    if isinstance(names, str):
        return names
    return str(entry.get("Name", "?"))


def _podman_ps(runner: CmdRunner) -> tuple[list[Mapping[str, Any]], str]:
    """`podman ps -a` entries of the demo containers; the error text if podman failed."""
    rc, out, err = runner(["podman", "ps", "-a", "--filter", f"label={DEMO_LABEL}", "--format", "json"])
    if rc != 0:
        return [], f"podman ps failed: {err.strip() or f'rc={rc}'}"
    try:
        entries = json.loads(out or "[]")
    except json.JSONDecodeError as exc:
        return [], f"podman ps printed no JSON: {exc}"
    return [e for e in entries if isinstance(e, Mapping)] if isinstance(entries, list) else [], ""


def _state(entry: Mapping[str, Any]) -> str:
    return str(entry.get("State", "?")).lower()


def node_states(runner: CmdRunner = run_cmd) -> tuple[list[NodeState], str]:
    """The demo containers' states and, for running ones, systemd's; the error text if podman failed."""
    entries, error = _podman_ps(runner)
    if error:
        return [], error
    found = {_container_name(entry): _state(entry) for entry in entries}
    states: list[NodeState] = []
    for name in sorted(set(DEMO_NODES) | set(found), key=lambda n: (n not in DEMO_NODES, n)):
        state = found.get(name, "missing")
        systemd = "-"
        if state == "running":
            rc, out, err = runner(["podman", "exec", name, "systemctl", "is-system-running"])
            systemd = out.strip() or err.strip() or f"rc={rc}"
        states.append(NodeState(name=name, state=state, systemd=systemd))
    return states, ""


def print_status(states: Sequence[NodeState], stream: TextIO) -> None:
    wide = max([len("NAME"), *(len(s.name) for s in states)])
    stream.write(f"{'NAME':<{wide}}  {'STATE':<10}  SYSTEMD\n")
    for s in states:
        stream.write(f"{s.name:<{wide}}  {s.state:<10}  {s.systemd}\n")


def all_healthy(states: Sequence[NodeState]) -> bool:
    by_name = {s.name: s for s in states}
    return all(name in by_name and by_name[name].healthy for name in DEMO_NODES)


# -- ownership, before `demo up` ---------------------------------------------------------------------------
# The containers keep state deployed with one checkout's generated secrets (LDAP, database and portal
# passwords). A second checkout, or a fresh clone on a machine restored from a snapshot, has other secrets,
# so deploying over those containers fails half-way. Each demo carries the id of the secrets it was built
# with; `demo up` reuses its own demo, replaces one whose checkout is gone, and refuses to touch one whose
# checkout still exists unless asked to (--replace).
def demo_id(secrets_dir: Path) -> str:
    """This checkout's demo id, created (root-only) on first use next to the generated secrets."""
    path = secrets_dir / DEMO_ID_FILE
    try:
        value = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        value = ""
    if value:
        return value
    secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    value = secrets.token_hex(8)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(value + "\n")
    return value


def owner_labels(secrets_dir: Path, ident: str) -> dict[str, str]:
    return {ID_LABEL: ident, OWNER_LABEL: str(secrets_dir.resolve())}


@dataclass(frozen=True)
class Container:
    name: str
    state: str
    ident: str  # the carme.demo_id label, "" on containers made before it existed
    owner: str  # the carme.demo_secrets label
    alive: bool  # podman says running and can exec in it (after a host restore it may say running, wrongly)


def demo_containers(runner: CmdRunner = run_cmd) -> tuple[list[Container], str]:
    entries, error = _podman_ps(runner)
    found: list[Container] = []
    for entry in entries:
        name = _container_name(entry)
        labels = entry.get("Labels")
        labels = labels if isinstance(labels, Mapping) else {}
        state = _state(entry)
        alive = state == "running" and runner(["podman", "exec", name, "true"])[0] == 0
        found.append(Container(name, state, str(labels.get(ID_LABEL, "")), str(labels.get(OWNER_LABEL, "")), alive))
    return found, error


@dataclass(frozen=True)
class UpPlan:
    remove_all: bool = False  # another checkout's demo, replaced: containers, network and home volume
    remove: tuple[str, ...] = ()  # our own containers, when podman lists one as running that is dead
    refuse: str = ""  # why nothing may be touched
    note: str = ""  # what is about to be removed, and why


def _owner_exists(owner: str, ident: str) -> bool:
    if not owner or not ident:
        return False
    try:
        return (Path(owner) / DEMO_ID_FILE).read_text(encoding="utf-8").strip() == ident
    except OSError:
        return False


def plan_up(containers: Sequence[Container], ident: str, replace: bool = False) -> UpPlan:
    """What `demo up` must clear away first, given the existing demo containers and this checkout's id."""
    foreign = [c for c in containers if c.ident != ident]
    if foreign:
        owners = sorted({c.owner for c in foreign if _owner_exists(c.owner, c.ident)})
        if owners and not replace:
            return UpPlan(
                refuse=f"the demo containers on this host were deployed from another checkout (secrets in "
                f"{', '.join(owners)}). Remove them from there with `carme demo down`, or run "
                "`carme demo up --replace` to delete them with their data."
            )
        why = "replaced as asked (--replace)" if owners else "its checkout or secrets are gone"
        return UpPlan(remove_all=True, note=f"removing the demo of another checkout: {why}")
    dead = [c.name for c in containers if c.state == "running" and not c.alive]
    if dead:
        # All of them, not only the dead: the daemons start afresh together, after a host restart as after a boot
        # (each node keeps its fixed address, roles/demo_nodes).
        note = (
            f"podman lists {', '.join(dead)} as running, but nothing runs there (the host was restarted or "
            "restored): recreating the demo's containers; /home is kept and site.yml redeploys them"
        )
        return UpPlan(remove=tuple(c.name for c in containers), note=note)
    return UpPlan()
