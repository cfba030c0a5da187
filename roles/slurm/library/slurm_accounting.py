#!/usr/bin/python
# SPDX-License-Identifier: GPL-3.0-or-later
"""Apply Slurm accounting objects (cluster, QOS, accounts, users) declaratively with sacctmgr.

Every sacctmgr call is an argv list: no value from the inventory ever reaches a shell.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_accounting
short_description: Declare the Slurm cluster, QOS, accounts and user associations
description:
  - Reads the current state with C(sacctmgr -n -P show ...), computes the difference and applies it.
  - Supports check mode and diff mode.
options:
  cluster: {description: ClusterName, type: str, required: true}
  qos:
    description:
      - "QOS list: name plus sacctmgr fields (QOS_FIELDS)."
      - "Preemption: Preempt (the QOS whose jobs this one's may preempt, a list; never the QOS itself), PreemptMode
        (requeue, cancel; unset means the cluster's PreemptMode) and GraceTime (seconds a job chosen for preemption
        runs on before it is requeued or cancelled) of the QOS that is preempted."
    type: list
    elements: dict
    default: []
  accounts:
    description:
      - "Accounts: name, description, organization, parent, qos, default_qos, plus association limits (ASSOC_FIELDS:
        GrpTRES, GrpTRESMins, GrpJobs, MaxJobs, ...) that bound the account as a whole (a group budget)."
      - "coordinators: the account's coordinators (its project managers), exactly these when given; unset leaves them."
    type: list
    elements: dict
    default: []
  users:
    description:
      - "Users: name, account, qos, default_qos, admin_level, plus association limits (ASSOC_FIELDS)."
      - "admin_level is None, Operator or Administrator (sacctmgr AdminLevel); it is set only when given."
      - "Limits on the user association bound everything the user runs in that account, whatever QOS or partition
        the job names: GrpTRES=gres/gpu=2 (GPUs at once), MaxJobs=4 (running jobs), GrpTRESMins=gres/gpu=6000 (a
        GPU-minute budget, monthly with PriorityUsageResetPeriod=MONTHLY). Only the limits given are managed; -1
        (or gres/gpu=-1) clears one."
    type: list
    elements: dict
    default: []
  purge_users:
    description: Delete associations of users not listed (root is never touched)
    type: bool
    default: false
  managed_accounts_only: {description: Purge only inside the accounts listed here, type: bool, default: true}
author: Carme developers
"""

EXAMPLES = r"""
- slurm_accounting:
    cluster: demo
    qos: [{name: interactive, MaxTRESPerUser: gres/gpu=1, MaxWall: "08:00:00"}]
    accounts: [{name: research, qos: [normal, interactive], default_qos: normal}]
    users:
      - {name: alice, account: research, qos: [normal, interactive], default_qos: normal,
         GrpTRES: gres/gpu=2, MaxJobs: 4, GrpTRESMins: gres/gpu=6000}
      - {name: carme-portal, account: services, admin_level: Operator}  # the portal stops any session for admins
    purge_users: true
"""

import re

from ansible.module_utils.basic import AnsibleModule

# sacctmgr "set" key -> "format" column for the same field (the same name, then the renamed ones)
QOS_FIELDS = {
    **{k: k for k in ("Description", "Flags", "GrpJobs", "GrpTRES", "GrpTRESMins", "GrpWall", "GraceTime")},
    **{k: k for k in ("MaxTRESPerNode", "MaxWall", "Preempt", "PreemptMode", "Priority", "UsageFactor")},
    "GrpSubmitJobs": "GrpSubmit",
    "MaxJobsPerUser": "MaxJobsPU",
    "MaxSubmitJobsPerUser": "MaxSubmitPU",
    "MaxTRESPerJob": "MaxTRES",
    "MaxTRESPerUser": "MaxTRESPU",
}
# association limits: sacctmgr "set" key -> "format" column of `sacctmgr show assoc`
ASSOC_FIELDS = {
    **{k: k for k in ("GrpJobs", "GrpTRES", "GrpTRESMins", "GrpTRESRunMins", "GrpWall", "MaxJobs", "Priority")},
    "GrpSubmitJobs": "GrpSubmit",
    "MaxSubmitJobs": "MaxSubmit",
    "MaxTRESPerJob": "MaxTRES",
    "MaxTRESMinsPerJob": "MaxTRESMins",
    "MaxWallDurationPerJob": "MaxWall",
}
TRES_KEYS = {"GrpTRES", "GrpTRESMins", "GrpTRESRunMins", "MaxTRESPerJob", "MaxTRESMinsPerJob", "MaxTRESPerUser", "MaxTRESPerNode"}
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
ADMIN_LEVELS = {"none": "None", "operator": "Operator", "administrator": "Administrator"}


UNSET_TIMES = ("", "-1", "UNLIMITED", "INFINITE")


def to_seconds(value, plain):
    """A Slurm time string in seconds: 'N' (N * ``plain`` seconds), 'M:S', 'H:M:S', 'D-H', 'D-H:M', 'D-H:M:S'."""
    days = 0
    if "-" in value:
        d, value = value.split("-", 1)
        days = int(d)
        hours, minutes, seconds = ([int(x) for x in value.split(":")] + [0, 0])[:3]
    else:
        parts = [int(x) for x in value.split(":")]
        if len(parts) == 1:
            return parts[0] * plain
        hours, minutes, seconds = [0] * (3 - len(parts)) + parts
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def norm_time(value):
    """Slurm time strings to minutes: '480', '30:00' (minutes:seconds), '8:00:00', '1-00:00:00', '2-12' (days-hours).

    Seconds round up to the next minute, as Slurm does (time_str2mins; sbatch(1) --time: "seconds values are rounded
    up to the next minute"): sacctmgr stores MaxWall=00:00:30 as one minute, and prints 00:01:00.
    """
    value = str(value).strip()
    if value in UNSET_TIMES:
        return ""
    try:
        return str(-(-to_seconds(value, 60) // 60))
    except ValueError:
        return value


def norm_seconds(value):
    """GraceTime to seconds: a plain number is seconds (sacctmgr's unit for it), and sacctmgr prints '00:00:30'."""
    value = str(value).strip()
    if value in UNSET_TIMES:
        return "0"
    try:
        return str(to_seconds(value, 1))
    except ValueError:
        return value


def norm(key, value):
    if key == "Preempt":  # the QOS this one may preempt, in any order; sacctmgr prints "" for none
        names = value if isinstance(value, (list, tuple)) else str(value or "").split(",")
        return ",".join(sorted(str(n).strip() for n in names if str(n).strip()))
    if key == "PreemptMode":  # sacctmgr prints "cluster" where the QOS has none of its own
        return str(value or "").strip().lower() or "cluster"
    if key == "GraceTime":
        return norm_seconds("" if value is None else value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    value = str(value).strip()
    if key.endswith("Wall") or key == "MaxWallDurationPerJob":
        return norm_time(value)
    if key in TRES_KEYS:  # "gres/gpu=2,cpu=8" in any order; "=-1" clears one TRES
        pairs = sorted(p.strip() for p in value.split(",") if p.strip() and not p.strip().endswith("=-1"))
        return ",".join(pairs)
    if value in ("-1", "UNLIMITED"):
        return ""
    if key == "Flags":
        return ",".join(sorted(v for v in value.split(",") if v))
    if key in ("Description",):
        return value.lower()
    return value


class Sacctmgr:
    def __init__(self, module):
        self.module = module
        self.commands = []

    def show(self, entity, fields, where=()):
        argv = ["sacctmgr", "-n", "-P", "show", entity, *where, "format=" + ",".join(fields)]
        rc, out, err = self.module.run_command(argv)
        if rc != 0:
            self.module.fail_json(msg=f"sacctmgr show {entity} failed: {err.strip() or out.strip()}", argv=argv)
        rows = []
        for line in out.splitlines():
            if line.strip():
                rows.append(dict(zip(fields, line.split("|"), strict=False)))
        return rows

    def run(self, argv):
        argv = ["sacctmgr", "-i", *argv]
        self.commands.append(argv)
        if self.module.check_mode:
            return
        rc, out, err = self.module.run_command(argv)
        text = (out + err).strip()
        if rc != 0 and "Nothing new added" not in text and "Nothing modified" not in text:
            self.module.fail_json(msg=f"sacctmgr failed: {text}", argv=argv, commands=self.commands)


ASSOC_KEYS = {
    "accounts": {"name", "description", "organization", "parent", "qos", "default_qos", "coordinators"},
    "users": {"name", "account", "qos", "default_qos", "admin_level"},
}


def limit_changes(item, cur, before, after, section, label):
    """sacctmgr set arguments for the association limits in ``item`` that differ from the row ``cur``."""
    changes = []
    for key in sorted(set(item) & set(ASSOC_FIELDS)):
        have = cur.get(ASSOC_FIELDS[key], "")
        if norm(key, have) != norm(key, item[key]):
            changes.append(f"{key}={item[key]}")
            before.setdefault(section, {}).setdefault(label, {})[key] = have
            after.setdefault(section, {}).setdefault(label, {})[key] = item[key]
    return changes


def apply_coordinators(s, accounts, before, after):
    """Make each account's coordinators (sacctmgr's per-account managers) exactly those it declares."""
    declared = {a["name"]: sorted(set(a["coordinators"])) for a in accounts if a.get("coordinators") is not None}
    if not declared:
        return
    rows = s.show("account", ["account", "coordinators"], where=["withcoord"])
    current = {r["account"]: sorted(c for c in r.get("coordinators", "").split(",") if c) for r in rows}
    for name, want in sorted(declared.items()):
        have = current.get(name, [])
        add, remove = sorted(set(want) - set(have)), sorted(set(have) - set(want))
        if add:
            s.run(["add", "coordinator", "account=" + name, "names=" + ",".join(add)])
        if remove:
            s.run(["remove", "coordinator", "account=" + name, "names=" + ",".join(remove)])
        if add or remove:
            before.setdefault("coordinators", {})[name] = have
            after.setdefault("coordinators", {})[name] = want


def validate(module, p):
    for kind in ("qos", "accounts", "users"):
        for i, item in enumerate(p[kind]):
            name = item.get("name")
            if not isinstance(name, str) or not NAME_RE.match(name):
                module.fail_json(msg=f"{kind}[{i}].name is missing or invalid: {name!r}")
            if kind == "qos" and name in norm("Preempt", item.get("Preempt")).split(","):
                module.fail_json(msg=f"qos[{i}] ({name}): Preempt names the QOS itself; its jobs would preempt each other")
            if kind == "qos":
                unknown = sorted(set(item) - set(QOS_FIELDS) - {"name"})
                if unknown:
                    module.fail_json(
                        msg=f"qos[{i}] ({name}): unknown field(s) {', '.join(unknown)}; "
                        f"known: {', '.join(sorted(QOS_FIELDS))}"
                    )
            if kind in ("accounts", "users"):
                unknown = sorted(set(item) - set(ASSOC_FIELDS) - ASSOC_KEYS[kind])
                if unknown:
                    module.fail_json(
                        msg=f"{kind}[{i}] ({name}): unknown field(s) {', '.join(unknown)}; "
                        f"known: {', '.join(sorted(ASSOC_KEYS[kind] | set(ASSOC_FIELDS)))}"
                    )
            bad = [c for c in item.get("coordinators") or [] if not NAME_RE.match(str(c))] if kind == "accounts" else []
            if bad:
                module.fail_json(msg=f"accounts[{i}] ({name}).coordinators: not a user name: {bad[0]!r}")
            if kind == "users" and not item.get("account"):
                module.fail_json(msg=f"users[{i}] ({name}): account is required")
            level = item.get("admin_level") if kind == "users" else None
            if level is not None and str(level).lower() not in ADMIN_LEVELS:
                module.fail_json(
                    msg=f"users[{i}] ({name}): admin_level must be one of None, Operator, Administrator, not {level!r}"
                )
    known_accounts = {a["name"] for a in p["accounts"]}
    for i, u in enumerate(p["users"]):
        if known_accounts and u["account"] not in known_accounts and u["account"] != "root":
            module.fail_json(msg=f"users[{i}] ({u['name']}): unknown account {u['account']!r}")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster=dict(type="str", required=True),
            qos=dict(type="list", elements="dict", default=[]),
            accounts=dict(type="list", elements="dict", default=[]),
            users=dict(type="list", elements="dict", default=[]),
            purge_users=dict(type="bool", default=False),
            managed_accounts_only=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    validate(module, p)
    cluster = p["cluster"]
    s = Sacctmgr(module)
    before, after = {}, {}

    # cluster
    clusters = {r["cluster"] for r in s.show("cluster", ["cluster"])}
    if cluster not in clusters:
        s.run(["add", "cluster", cluster])
        after["cluster"] = cluster

    # QOS
    if p["qos"]:
        cols = ["name", *sorted(set(QOS_FIELDS.values()))]
        current = {r["name"]: r for r in s.show("qos", cols)}
        for q in p["qos"]:
            name = q["name"]
            if name not in current:
                s.run(["add", "qos", name])
                cur = {}
            else:
                cur = current[name]
            changes = []
            for key, value in sorted(q.items()):
                if key == "name":
                    continue
                have = norm(key, cur.get(QOS_FIELDS[key], ""))
                if have != norm(key, value):
                    if isinstance(value, list):
                        value = ",".join(str(v) for v in value)  # "Preempt=" (empty) clears the list
                    changes.append(f"{key}={value}")
                    before.setdefault("qos", {}).setdefault(name, {})[key] = cur.get(QOS_FIELDS[key], "")
                    after.setdefault("qos", {}).setdefault(name, {})[key] = value
            if changes:
                s.run(["modify", "qos", "where", "name=" + name, "set", *changes])

    # accounts
    assoc_fields = ["account", "user", "qos", "defaultqos", "parentname", *sorted(set(ASSOC_FIELDS.values()))]
    assocs = s.show("assoc", assoc_fields, where=["where", "cluster=" + cluster])
    acct_rows = {r["account"]: r for r in assocs if not r["user"]}
    for a in p["accounts"]:
        name = a["name"]
        qos = sorted(a.get("qos") or [])
        if name not in acct_rows:
            argv = ["add", "account", name, "Cluster=" + cluster]
            if a.get("description"):
                argv.append("Description=" + str(a["description"]))
            argv.append("Organization=" + str(a.get("organization") or cluster))
            if a.get("parent"):
                argv.append("Parent=" + a["parent"])
            s.run(argv)
            cur_qos, cur_def, cur = [], "", {}
            after.setdefault("accounts", {})[name] = "added"
        else:
            cur = acct_rows[name]
            cur_qos = sorted(q for q in cur["qos"].split(",") if q)
            cur_def = cur["defaultqos"]
        sets = limit_changes(a, cur, before, after, "account_limits", name)
        if qos and qos != cur_qos:
            sets.append("QOS=" + ",".join(qos))
        if a.get("default_qos") and a["default_qos"] != cur_def:
            sets.append("DefaultQOS=" + a["default_qos"])
        if sets:
            s.run(["modify", "account", "where", "name=" + name, "cluster=" + cluster, "set", *sets])
            after.setdefault("accounts", {}).setdefault(name, sets)

    # users (one association per user and account)
    user_rows = [r for r in assocs if r["user"]]
    have = {(r["user"], r["account"]): r for r in user_rows}
    want = {(u["name"], u["account"]): u for u in p["users"]}
    for (user, account), u in sorted(want.items()):
        if (user, account) not in have:
            s.run(["add", "user", user, "Account=" + account, "Cluster=" + cluster])
            after.setdefault("users", {})[user] = "added to " + account
            cur = {"qos": "", "defaultqos": ""}
        else:
            cur = have[(user, account)]
        sets = limit_changes(u, cur, before, after, "user_limits", f"{user}@{account}")
        if u.get("qos"):
            q = sorted(u["qos"])
            if q != sorted(x for x in cur["qos"].split(",") if x):
                sets.append("QOS=" + ",".join(q))
        if u.get("default_qos") and u["default_qos"] != cur["defaultqos"]:
            sets.append("DefaultQOS=" + u["default_qos"])
        if sets:
            where = ["where", "name=" + user, "account=" + account, "cluster=" + cluster]
            s.run(["modify", "user", *where, "set", *sets])
            after.setdefault("users", {}).setdefault(user, sets)
    # admin levels (a property of the user, not of an association)
    levels = {u["name"]: ADMIN_LEVELS[str(u["admin_level"]).lower()] for u in p["users"] if u.get("admin_level")}
    if levels:
        current_levels = {r["user"]: r["adminlevel"] for r in s.show("user", ["user", "adminlevel"])}
        for user, level in sorted(levels.items()):
            have_level = current_levels.get(user, "None")
            if have_level.lower() != level.lower():
                s.run(["modify", "user", "where", "name=" + user, "set", "AdminLevel=" + level])
                before.setdefault("admin_level", {})[user] = have_level
                after.setdefault("admin_level", {})[user] = level
    apply_coordinators(s, p["accounts"], before, after)  # after the users: a coordinator must be one
    if p["purge_users"]:
        managed = {a["name"] for a in p["accounts"]}
        for user, account in sorted(have):
            if (user, account) in want or user == "root":
                continue
            if p["managed_accounts_only"] and account not in managed:
                continue
            s.run(["delete", "user", "where", "name=" + user, "account=" + account, "cluster=" + cluster])
            before.setdefault("users", {})[user] = account
            after.setdefault("users", {})[user] = "removed from " + account

    changed = bool(s.commands)
    module.exit_json(changed=changed, commands=s.commands, diff={"before": before, "after": after})


if __name__ == "__main__":
    main()
