#!/usr/bin/python
# SPDX-License-Identifier: GPL-3.0-or-later
"""Declare POSIX users and groups in an LDAP directory (ldap3, StartTLS with a CA).

The whole declaration is validated before the first write: an invalid entry fails the task, naming the entry,
and the directory is left untouched.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: ldap_users
short_description: Create, update and remove POSIX users and groups in LDAP
description:
  - Users are C(inetOrgPerson)+C(posixAccount)+C(shadowAccount) entries C(uid=<name>,ou=<people_ou>,<base_dn>);
    groups are C(posixGroup) entries C(cn=<name>,ou=<groups_ou>,<base_dn>) whose C(memberUid) lists the users whose
    primary group it is plus those that list it in C(groups).
  - Initial passwords are set only when a user is created, with the Password Modify extended operation (the server
    hashes them).
  - Supports check mode and diff mode. With I(validate_only) nothing connects anywhere.
options:
  uri: {description: "ldap:// URI (StartTLS is always used) or ldaps://", type: str}
  base_dn: {description: Directory base DN, type: str}
  bind_dn: {description: DN allowed to write users and groups, type: str}
  bind_password: {description: Its password, type: str}
  ca_file: {description: CA bundle that signed the server certificate, type: path}
  people_ou: {description: OU of the users, type: str, default: people}
  groups_ou: {description: OU of the groups, type: str, default: groups}
  users: {description: "name, uid, group, full_name, email, shell, groups, state", type: list, elements: dict, default: []}
  groups: {description: "name, gid, description, state (other keys are ignored)", type: list, elements: dict, default: []}
  passwords: {description: "name -> initial password, for users this run creates", type: dict, default: {}}
  purge: {description: Delete users and groups under the OUs that are not declared, type: bool, default: false}
  home_base: {description: Parent of the home directories, type: str, default: /home}
  default_shell: {description: loginShell when a user sets none, type: str, default: /bin/bash}
  validate_only: {description: Only validate the declaration, type: bool, default: false}
author: Carme developers
"""

EXAMPLES = r"""
- ldap_users:
    uri: ldap://head
    base_dn: dc=carme,dc=demo
    bind_dn: cn=admin,dc=carme,dc=demo
    bind_password: "{{ ldap_admin_password }}"
    ca_file: /etc/ssl/certs/ca-certificates.crt
    groups: [{name: research, gid: 20000}]
    users: [{name: alice, uid: 20001, group: research, full_name: Alice Example, email: alice@example.org}]
    passwords: {alice: "{{ generated }}"}
"""

RETURN = r"""
created: {description: Users created by this run, type: list, returned: always}
removed: {description: Users deleted by this run, type: list, returned: always}
to_create: {description: Users that do not exist yet (they need an initial password), type: list, returned: always}
"""

import re

from ansible.module_utils.basic import AnsibleModule

NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
USER_KEYS = {"name", "uid", "group", "full_name", "email", "shell", "groups", "state"}
STATES = ("present", "absent")


def _check_id(errors, label, key, value, seen, kind, entries, i):
    """A uid/gid: an integer >= 1000, unique among ``entries`` (``seen`` maps the ids so far to their index)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1000 <= value < 2**31:
        errors.append("%s: %s must be an integer >= 1000, got %r" % (label, key, value))
    elif value in seen:
        errors.append("%s: duplicate %s %d, also %s[%d] (%s)" % (label, key, value, kind, seen[value], entries[seen[value]]["name"]))
    else:
        seen[value] = i


def validate(users, groups):
    """Return a list of error strings, each naming the offending entry."""
    errors = []
    gnames, gids = {}, {}
    for i, g in enumerate(groups):
        name = g.get("name")
        label = "groups[%d] (%s)" % (i, name)
        if not isinstance(name, str) or not NAME_RE.match(name):
            errors.append("%s: name is missing or invalid" % label)
            continue
        if g.get("state", "present") not in STATES:
            errors.append("%s: state must be present or absent" % label)
        if name in gnames:
            errors.append("%s: duplicate group name, also groups[%d]" % (label, gnames[name]))
        gnames[name] = i
        if g.get("state", "present") == "absent":
            continue
        _check_id(errors, label, "gid", g.get("gid"), gids, "groups", groups, i)
    present_groups = {g["name"] for g in groups if isinstance(g.get("name"), str) and g.get("state", "present") == "present"}
    unames, uids = {}, {}
    for i, u in enumerate(users):
        name = u.get("name")
        label = "users[%d] (%s)" % (i, name)
        if not isinstance(name, str) or not NAME_RE.match(name):
            errors.append("%s: name is missing or invalid (lower case, digits, _ and -, up to 32)" % label)
            continue
        if name in unames:
            errors.append("%s: duplicate user name, also users[%d]" % (label, unames[name]))
        unames[name] = i
        if name in gnames and u.get("state", "present") == "present":
            pass  # a user may share its name with a group (user private groups)
        unknown = sorted(set(u) - USER_KEYS)
        if unknown:
            errors.append("%s: unknown key(s) %s" % (label, ", ".join(unknown)))
        state = u.get("state", "present")
        if state not in STATES:
            errors.append("%s: state must be present or absent, got %r" % (label, state))
        if state == "absent":
            continue
        _check_id(errors, label, "uid", u.get("uid"), uids, "users", users, i)
        if u.get("group") not in present_groups:
            errors.append("%s: unknown group %r (declare it in the groups list)" % (label, u.get("group")))
        for extra in u.get("groups") or []:
            if extra not in present_groups:
                errors.append("%s: unknown group %r in groups" % (label, extra))
        email = u.get("email")
        if email is not None and (not isinstance(email, str) or "@" not in email):
            errors.append("%s: email %r is not an address" % (label, email))
    return errors


def first(entry, attr, default=None):
    value = entry.get(attr)
    if isinstance(value, list):
        return value[0] if value else default
    return value if value is not None else default


class Directory:
    def __init__(self, module, p):
        import ssl

        import ldap3
        from ldap3.core.exceptions import LDAPException

        self.ldap3 = ldap3
        self.module = module
        self.LDAPException = LDAPException
        tls = ldap3.Tls(ca_certs_file=p["ca_file"], validate=ssl.CERT_REQUIRED, version=ssl.PROTOCOL_TLS_CLIENT)
        use_ssl = p["uri"].startswith("ldaps://")
        server = ldap3.Server(p["uri"], use_ssl=use_ssl, tls=tls, connect_timeout=10)
        try:
            self.conn = ldap3.Connection(server, user=p["bind_dn"], password=p["bind_password"], raise_exceptions=True,
                                         receive_timeout=30)
            self.conn.open()
            if not use_ssl:
                self.conn.start_tls()
            self.conn.bind()
        except LDAPException as exc:
            module.fail_json(msg="cannot bind to %s as %s over TLS: %s" % (p["uri"], p["bind_dn"], exc))

    def search(self, base, flt, attrs):
        try:
            self.conn.search(base, flt, search_scope=self.ldap3.LEVEL, attributes=attrs)
        except self.LDAPException as exc:
            if "noSuchObject" in type(exc).__name__ or "NoSuchObject" in type(exc).__name__:
                self.module.fail_json(msg="%s does not exist (is the server role applied?)" % base)
            self.module.fail_json(msg="search of %s failed: %s" % (base, exc))
        return {e.entry_dn: e.entry_attributes_as_dict for e in self.conn.entries}

    def call(self, what, *args, **kwargs):
        try:
            getattr(self.conn, what)(*args, **kwargs)
        except self.LDAPException as exc:
            self.module.fail_json(msg="%s %s failed: %s" % (what, args[0] if args else "", exc))

    def set_password(self, dn, password):
        try:
            self.conn.extend.standard.modify_password(dn, new_password=password)
        except self.LDAPException as exc:
            self.module.fail_json(msg="setting the initial password of %s failed: %s" % (dn, exc))


def user_attrs(u, group_gids, p):
    full = (u.get("full_name") or u["name"]).strip()
    parts = full.split()
    attrs = {
        "cn": full,
        "sn": parts[-1] if parts else u["name"],
        "displayName": full,
        "uidNumber": str(u["uid"]),
        "gidNumber": str(group_gids[u["group"]]),
        "homeDirectory": "%s/%s" % (p["home_base"].rstrip("/"), u["name"]),
        "loginShell": u.get("shell") or p["default_shell"],
    }
    if len(parts) > 1:
        attrs["givenName"] = " ".join(parts[:-1])
    if u.get("email"):
        attrs["mail"] = u["email"]
    return attrs


USER_MANAGED = ("cn", "sn", "givenName", "displayName", "uidNumber", "gidNumber", "homeDirectory", "loginShell", "mail")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            uri=dict(type="str"),
            base_dn=dict(type="str"),
            bind_dn=dict(type="str"),
            bind_password=dict(type="str", no_log=True),
            ca_file=dict(type="path"),
            people_ou=dict(type="str", default="people"),
            groups_ou=dict(type="str", default="groups"),
            users=dict(type="list", elements="dict", default=[]),
            groups=dict(type="list", elements="dict", default=[]),
            passwords=dict(type="dict", default={}, no_log=True),
            purge=dict(type="bool", default=False),
            home_base=dict(type="str", default="/home"),
            default_shell=dict(type="str", default="/bin/bash"),
            validate_only=dict(type="bool", default=False),
        ),
        required_if=[("validate_only", False, ("uri", "base_dn", "bind_dn", "bind_password", "ca_file"))],
        supports_check_mode=True,
    )
    p = module.params
    errors = validate(p["users"], p["groups"])
    if errors:
        module.fail_json(msg="invalid users/groups (nothing was changed): " + "; ".join(errors), errors=errors)
    if p["validate_only"]:
        module.exit_json(changed=False, created=[], removed=[], to_create=[])

    people = "ou=%s,%s" % (p["people_ou"], p["base_dn"])
    groups_base = "ou=%s,%s" % (p["groups_ou"], p["base_dn"])
    d = Directory(module, p)
    cur_users = {first(a, "uid"): (dn, a) for dn, a in d.search(people, "(objectClass=posixAccount)",
                                                                ["uid", "objectClass", *USER_MANAGED]).items()}
    cur_groups = {first(a, "cn"): (dn, a) for dn, a in d.search(groups_base, "(objectClass=posixGroup)",
                                                                ["cn", "gidNumber", "memberUid", "description"]).items()}

    want_users = [u for u in p["users"] if u.get("state", "present") == "present"]
    want_groups = [g for g in p["groups"] if g.get("state", "present") == "present"]
    want_user_names = {u["name"] for u in want_users}
    want_group_names = {g["name"] for g in want_groups}
    drop_users = sorted(n for n in cur_users if n not in want_user_names
                        and (p["purge"] or any(u["name"] == n and u.get("state") == "absent" for u in p["users"])))
    drop_groups = sorted(n for n in cur_groups if n not in want_group_names
                         and (p["purge"] or any(g["name"] == n and g.get("state") == "absent" for g in p["groups"])))

    # conflicts with entries that stay in the directory (checked before the first write)
    errors = []
    staying_users = {n: a for n, (dn, a) in cur_users.items() if n not in want_user_names and n not in drop_users}
    for u in want_users:
        for other, a in staying_users.items():
            if str(first(a, "uidNumber")) == str(u["uid"]):
                errors.append("user %s: uid %d is already used by %s in the directory" % (u["name"], u["uid"], other))
    staying_groups = {n: a for n, (dn, a) in cur_groups.items() if n not in want_group_names and n not in drop_groups}
    for g in want_groups:
        for other, a in staying_groups.items():
            if str(first(a, "gidNumber")) == str(g["gid"]):
                errors.append("group %s: gid %d is already used by %s in the directory" % (g["name"], g["gid"], other))
    to_create = sorted(u["name"] for u in want_users if u["name"] not in cur_users)
    missing_pw = [n for n in to_create if not p["passwords"].get(n)]
    if missing_pw and not module.check_mode:
        errors.append("no initial password given for new user(s) %s" % ", ".join(missing_pw))
    if errors:
        module.fail_json(msg="cannot apply users/groups (nothing was changed): " + "; ".join(errors), errors=errors)

    gid_of = {g["name"]: g["gid"] for g in want_groups}
    members = {g["name"]: set() for g in want_groups}
    for u in want_users:
        members[u["group"]].add(u["name"])
        for extra in u.get("groups") or []:
            members[extra].add(u["name"])

    ops = []  # (kind, args) applied in order
    before, after = {}, {}
    for g in want_groups:
        name = g["name"]
        attrs = {"gidNumber": str(g["gid"]), "memberUid": sorted(members[name])}
        if g.get("description"):
            attrs["description"] = str(g["description"])
        if name not in cur_groups:
            add = dict(attrs)
            if not add["memberUid"]:
                del add["memberUid"]
            ops.append(("add", "cn=%s,%s" % (name, groups_base), ["top", "posixGroup"], dict(add, cn=name)))
            after.setdefault("groups", {})[name] = attrs
            continue
        dn, cur = cur_groups[name]
        changes = {}
        for key, value in attrs.items():
            have = sorted(str(v) for v in cur.get(key, [])) if key == "memberUid" else str(first(cur, key, ""))
            if have != value:
                changes[key] = [("MODIFY_REPLACE", value if isinstance(value, list) else [value])]
                before.setdefault("groups", {}).setdefault(name, {})[key] = have
                after.setdefault("groups", {}).setdefault(name, {})[key] = value
        if "description" not in attrs and cur.get("description"):
            changes["description"] = [("MODIFY_DELETE", [])]
        if changes:
            ops.append(("modify", dn, changes))

    for u in want_users:
        name = u["name"]
        attrs = user_attrs(u, gid_of, p)
        if name not in cur_users:
            ops.append(("add", "uid=%s,%s" % (name, people), ["top", "inetOrgPerson", "posixAccount", "shadowAccount"],
                        dict(attrs, uid=name)))
            after.setdefault("users", {})[name] = attrs
            continue
        dn, cur = cur_users[name]
        changes = {}
        for key in USER_MANAGED:
            have = first(cur, key)
            have = None if have is None else str(have)
            if have != attrs.get(key):
                if key in attrs:
                    changes[key] = [("MODIFY_REPLACE", [attrs[key]])]
                else:
                    changes[key] = [("MODIFY_DELETE", [])]
                before.setdefault("users", {}).setdefault(name, {})[key] = have
                after.setdefault("users", {}).setdefault(name, {})[key] = attrs.get(key)
        if changes:
            ops.append(("modify", dn, changes))

    for name in drop_users:
        ops.append(("delete", cur_users[name][0]))
        before.setdefault("users", {})[name] = "present"
        after.setdefault("users", {})[name] = "absent"
    for name in drop_groups:
        ops.append(("delete", cur_groups[name][0]))
        before.setdefault("groups", {})[name] = "present"
        after.setdefault("groups", {})[name] = "absent"

    if not module.check_mode:
        for op in ops:
            if op[0] == "add":
                d.call("add", op[1], op[2], op[3])
            elif op[0] == "modify":
                changes = {k: [(getattr(d.ldap3, kind), vals) for kind, vals in v] for k, v in op[2].items()}
                d.call("modify", op[1], changes)
            else:
                d.call("delete", op[1])
        for name in to_create:
            d.set_password("uid=%s,%s" % (name, people), p["passwords"][name])
        d.conn.unbind()

    module.exit_json(changed=bool(ops), created=to_create, removed=drop_users, to_create=to_create,
                     operations=[(op[0], op[1]) for op in ops], diff={"before": before, "after": after})


if __name__ == "__main__":
    main()
