#!/usr/bin/python
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible module: make a Zabbix server match the inventory, through its API with zabbix-utils."""

from __future__ import annotations

DOCUMENTATION = r"""
module: carme_zabbix
short_description: Bring Zabbix in line with the inventory (admin password, portal user, Carme template, hosts)
description:
  - Logs in as the admin user. When the generated password does not work yet but the initial one does, changes the
    admin password to the generated one (the server is new).
  - Imports the Carme template from a JSON export file when its content differs from what was imported last (a
    sha256 of the file is kept in the template's description), so a re-run imports nothing.
  - Keeps a read-only API user (own user role, user group with read rights on the hosts' group only).
  - Creates, updates and deletes the hosts of one host group so that they are exactly I(hosts): agent interface,
    PSK (a hash of the key is kept in a host tag, as Zabbix never returns the key), the template and host macros.
  - On Zabbix 7.0 also sets the global timeout of agent checks to I(item_timeout) (7.0 takes it from there, not
    from the server's or the agent's Timeout); older servers ignore the option.
  - Speaks the API of Zabbix 6.0 (Debian 12) and 7.0 (Debian 13): from 6.2 on, host and template groups are
    separate (import rules, host.get, user group rights) and from 6.4 on a user's own password change needs the
    current one.
  - Reports C(changed) only on a real change; supports check mode.
requirements: [zabbix-utils]
options:
  url: {type: str, required: true, description: Frontend URL (https://host:port/)}
  validate_certs: {type: bool, default: true, description: Check the frontend's certificate}
  ca_file: {type: path, description: CA (or self-signed certificate) the frontend's certificate is checked against}
  login_user: {type: str, default: Admin, description: Admin user}
  login_password: {type: str, required: true, no_log: true, description: The admin password to have}
  initial_password: {type: str, default: zabbix, no_log: true, description: Admin password of a new server}
  template_file: {type: path, required: true, description: Template export (JSON) on the target}
  template_name: {type: str, default: Carme, description: Technical name of the template in the file}
  host_group: {type: str, required: true, description: Host group that holds exactly the managed hosts}
  hosts: {type: list, elements: dict, required: true, description: "[{name, address, port, psk_identity, psk, macros}]"}
  api_user: {type: str, required: true, description: Read-only API user (for the portal)}
  api_password: {type: str, required: true, no_log: true, description: Its password}
  timeout: {type: int, default: 60, description: Seconds per API call}
  item_timeout: {type: str, description: "Global timeout of agent checks on Zabbix 7.0+ (e.g. 10s)"}
"""

import hashlib
import json
import ssl
from typing import Any

from ansible.module_utils.basic import AnsibleModule

try:
    from zabbix_utils import APIRequestError
    from zabbix_utils import ZabbixAPI
except ImportError:  # reported by main()
    ZabbixAPI = None

PSK_TAG = "carme-psk"
MANAGED_TAG = "carme-managed"
API_ROLE = "Carme read-only API"
API_GROUP = "Carme read-only API"
API_METHODS = ("*.get", "user.logout")


def psk_digest(identity: str, psk: str) -> str:
    """Zabbix never returns the PSK nor (6.0) its identity: a hash of both, kept in a host tag, shows a change."""
    return hashlib.sha256(f"{identity}\n{psk}".encode()).hexdigest()[:32]


class Sync:
    def __init__(self, module: AnsibleModule) -> None:
        self.m = module
        self.p = module.params
        self.check = module.check_mode
        self.changed: dict[str, Any] = {}
        self.version = 6.0  # the server's major version, from the API (set in run)

    # -- connection ---------------------------------------------------------------------------------------------
    def connect(self) -> ZabbixAPI:
        ctx = None
        if self.p["ca_file"]:
            ctx = ssl.create_default_context(cafile=self.p["ca_file"])
        return ZabbixAPI(url=self.p["url"], validate_certs=self.p["validate_certs"], ssl_context=ctx,
                         timeout=self.p["timeout"])

    def try_login(self, user: str, password: str) -> ZabbixAPI | None:
        api = self.connect()
        try:
            api.login(user=user, password=password)
        except APIRequestError:
            return None
        return api

    def admin(self) -> ZabbixAPI:
        user, wanted = self.p["login_user"], self.p["login_password"]
        api = self.try_login(user, wanted)
        if api is not None:
            return api
        api = self.try_login(user, self.p["initial_password"])
        if api is None:
            self.m.fail_json(msg=f"Cannot log in to Zabbix as {user} with the generated nor the initial password")
        self.changed["admin_password"] = True
        if not self.check:
            uid = api.user.get(filter={"username": user}, output=["userid"])[0]["userid"]
            current = {"current_passwd": self.p["initial_password"]} if api.version.major >= 6.4 else {}
            api.user.update(userid=uid, passwd=wanted, **current)
            api = self.try_login(user, wanted)
            if api is None:
                self.m.fail_json(msg="The admin password was changed but the new one is refused")
        return api

    # -- template -----------------------------------------------------------------------------------------------
    def template(self, api: ZabbixAPI) -> None:
        with open(self.p["template_file"], "rb") as f:
            raw = f.read()
        digest = hashlib.sha256(raw).hexdigest()
        marker = f"[source sha256 {digest}]"
        doc = json.loads(raw)
        tpl = next(t for t in doc["zabbix_export"]["templates"] if t["template"] == self.p["template_name"])
        found = api.template.get(filter={"host": [tpl["template"]]}, output=["templateid", "description"])
        if found and marker in found[0]["description"]:
            return
        self.changed["template"] = True
        if self.check:
            return
        tpl["description"] = (tpl.get("description", "") + "\n" + marker).strip()
        yes = {"createMissing": True, "updateExisting": True}
        groups = ({"host_groups": {"createMissing": True}, "template_groups": {"createMissing": True}}
                  if self.version >= 6.2 else {"groups": {"createMissing": True}})
        rules = {
            **groups,
            "templates": yes,
            "items": {**yes, "deleteMissing": True},
            "triggers": {**yes, "deleteMissing": True},
            "discoveryRules": {**yes, "deleteMissing": True},
            "templateLinkage": {"createMissing": True},
            "valueMaps": {**yes, "deleteMissing": True},
        }
        api.configuration.import_(format="json", source=json.dumps(doc), rules=rules)

    # -- read-only API user -------------------------------------------------------------------------------------
    def api_user(self, api: ZabbixAPI, groupid: str) -> None:
        # type 1 = User; only the API's *.get methods and logging out (api.mode 1 = allow list)
        rules = {"api.access": "1", "api.mode": "1", "api": sorted(API_METHODS)}
        roles = api.role.get(filter={"name": [API_ROLE]}, output=["roleid"], selectRules=list(rules))
        if roles:
            roleid = roles[0]["roleid"]
            have = roles[0].get("rules", {})
            if {k: (sorted(have.get(k, [])) if k == "api" else str(have.get(k))) for k in rules} != rules:
                self.changed["api_role"] = True
                if not self.check:
                    api.role.update(roleid=roleid, rules=rules)
        else:
            self.changed["api_role"] = True
            roleid = "0"
            if not self.check:
                roleid = api.role.create(name=API_ROLE, type=1, rules=rules)["roleids"][0]
        key = "hostgroup_rights" if self.version >= 6.2 else "rights"  # 6.2: host and template group rights
        select = {"selectHostGroupRights" if self.version >= 6.2 else "selectRights": "extend"}
        groups = api.usergroup.get(filter={"name": [API_GROUP]}, output=["usrgrpid"], **select)
        rights = [{"id": groupid, "permission": 2}]  # 2 = read only
        if not groups:
            self.changed["api_group"] = True
            usrgrpid = "0"
            if not self.check:
                usrgrpid = api.usergroup.create(name=API_GROUP, **{key: rights})["usrgrpids"][0]
        else:
            usrgrpid = groups[0]["usrgrpid"]
            have = [{"id": r["id"], "permission": int(r["permission"])} for r in groups[0].get(key, [])]
            if have != rights:
                self.changed["api_group"] = True
                if not self.check:
                    api.usergroup.update(usrgrpid=usrgrpid, **{key: rights})
        name, password = self.p["api_user"], self.p["api_password"]
        users = api.user.get(filter={"username": [name]}, output=["userid", "roleid"], selectUsrgrps=["usrgrpid"])
        if not users:
            self.changed["api_user"] = True
            if not self.check:
                api.user.create(username=name, passwd=password, roleid=roleid, usrgrps=[{"usrgrpid": usrgrpid}])
            return
        user = users[0]
        update: dict[str, Any] = {}
        if user["roleid"] != roleid:
            update["roleid"] = roleid
        if [g["usrgrpid"] for g in user["usrgrps"]] != [usrgrpid]:
            update["usrgrps"] = [{"usrgrpid": usrgrpid}]
        probe = self.try_login(name, password)
        if probe is None:
            update["passwd"] = password
        else:
            probe.logout()
        if update:
            self.changed["api_user"] = sorted(k for k in update if k != "passwd") + (
                ["password"] if "passwd" in update else [])
            if not self.check:
                api.user.update(userid=user["userid"], **update)

    # -- global settings (7.0) -----------------------------------------------------------------------------------
    def settings(self, api: ZabbixAPI) -> None:
        """7.0 takes the timeout of a passive agent check from its global settings (default 3s), not a config file."""
        wanted = self.p["item_timeout"]
        if self.version < 7.0 or not wanted:
            return
        have = api.settings.get(output=["timeout_zabbix_agent"])
        if have.get("timeout_zabbix_agent") == wanted:
            return
        self.changed["item_timeout"] = wanted
        if not self.check:
            api.settings.update(timeout_zabbix_agent=wanted)

    # -- hosts --------------------------------------------------------------------------------------------------
    def host_group(self, api: ZabbixAPI) -> str:
        found = api.hostgroup.get(filter={"name": [self.p["host_group"]]}, output=["groupid"])
        if found:
            return str(found[0]["groupid"])
        self.changed["host_group"] = True
        if self.check:
            return "0"
        return str(api.hostgroup.create(name=self.p["host_group"])["groupids"][0])

    def hosts(self, api: ZabbixAPI, groupid: str) -> None:
        tpl = api.template.get(filter={"host": [self.p["template_name"]]}, output=["templateid"])
        templateid = tpl[0]["templateid"] if tpl else "0"
        existing = {}
        if groupid != "0":
            for h in api.host.get(groupids=[groupid], output=["hostid", "host", "tls_connect", "tls_accept"],
                                  selectInterfaces=["interfaceid", "type", "main", "useip", "ip", "dns", "port"],
                                  selectParentTemplates=["templateid"], selectMacros=["macro", "value"],
                                  selectTags=["tag", "value"], **{self.select_groups: ["groupid"]}):
                existing[h["host"]] = h
        wanted = {h["name"]: h for h in self.p["hosts"]}
        created, updated, removed = [], {}, []
        for name, want in wanted.items():
            psk = str(want["psk"])
            tags = [{"tag": MANAGED_TAG, "value": "true"},
                    {"tag": PSK_TAG, "value": psk_digest(want["psk_identity"], psk)}]
            macros = sorted(({"macro": k, "value": str(v)} for k, v in (want.get("macros") or {}).items()),
                            key=lambda m: m["macro"])
            iface = {"type": "1", "main": "1", "useip": "0", "ip": "", "dns": str(want.get("address") or name),
                     "port": str(want.get("port") or 10050)}
            spec: dict[str, Any] = {"groups": [{"groupid": groupid}], "templates": [{"templateid": templateid}],
                                    "macros": macros, "tags": tags, "tls_connect": 2, "tls_accept": 2,
                                    "tls_psk_identity": want["psk_identity"], "tls_psk": psk}
            have = existing.get(name)
            if have is None:
                created.append(name)
                if not self.check:
                    api.host.create(host=name, interfaces=[iface], **spec)
                continue
            diff = []
            ifaces = [{k: str(i[k]) for k in iface} for i in have["interfaces"]]
            if ifaces != [iface]:
                diff.append("interface")
            if sorted(t["templateid"] for t in have["parentTemplates"]) != [templateid]:
                diff.append("templates")
            if sorted(({"macro": m["macro"], "value": m["value"]} for m in have["macros"]),
                      key=lambda m: m["macro"]) != macros:
                diff.append("macros")
            if sorted(have["tags"], key=lambda t: t["tag"]) != sorted(tags, key=lambda t: t["tag"]):
                diff.append("psk")
            if (str(have["tls_connect"]), str(have["tls_accept"])) != ("2", "2"):
                diff.append("tls")
            if [g["groupid"] for g in have[self.groups_key]] != [groupid]:
                diff.append("groups")
            if not diff:
                continue
            updated[name] = diff
            if self.check:
                continue
            update = dict(spec)
            # templates_clear unlinks and clears what a previous template left
            old = [t["templateid"] for t in have["parentTemplates"] if t["templateid"] != templateid]
            if old:
                update["templates_clear"] = [{"templateid": t} for t in old]
            if "interface" in diff:  # replaces all interfaces; the first keeps its id (items refer to it)
                first = {"interfaceid": have["interfaces"][0]["interfaceid"]} if have["interfaces"] else {}
                update["interfaces"] = [{**iface, **first}]
            api.host.update(hostid=have["hostid"], **update)
        for name, have in existing.items():
            if name not in wanted:
                removed.append(name)
                if not self.check:
                    api.host.delete(have["hostid"])
        if created:
            self.changed["hosts_created"] = created
        if updated:
            self.changed["hosts_updated"] = updated
        if removed:
            self.changed["hosts_removed"] = removed

    @property
    def select_groups(self) -> str:
        return "selectHostGroups" if self.version >= 6.2 else "selectGroups"

    @property
    def groups_key(self) -> str:
        return "hostgroups" if self.version >= 6.2 else "groups"

    def run(self) -> None:
        api = self.admin()
        self.version = float(api.version.major)
        try:
            self.settings(api)
            self.template(api)
            groupid = self.host_group(api)
            self.hosts(api, groupid)
            self.api_user(api, groupid)
        except APIRequestError as exc:
            self.m.fail_json(msg=f"Zabbix API: {exc}", changes=self.changed)
        finally:
            api.logout()
        self.m.exit_json(changed=bool(self.changed), changes=self.changed)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "validate_certs": {"type": "bool", "default": True},
            "ca_file": {"type": "path"},
            "login_user": {"type": "str", "default": "Admin"},
            "login_password": {"type": "str", "required": True, "no_log": True},
            "initial_password": {"type": "str", "default": "zabbix", "no_log": True},
            "template_file": {"type": "path", "required": True},
            "template_name": {"type": "str", "default": "Carme"},
            "host_group": {"type": "str", "required": True},
            "hosts": {"type": "list", "elements": "dict", "required": True},
            "api_user": {"type": "str", "required": True},
            "api_password": {"type": "str", "required": True, "no_log": True},
            "timeout": {"type": "int", "default": 60},
            "item_timeout": {"type": "str"},
        },
        supports_check_mode=True,
    )
    if ZabbixAPI is None:
        module.fail_json(msg="zabbix-utils is missing in the Python that runs this module")
    for h in module.params["hosts"]:
        for key in ("name", "psk_identity", "psk"):
            if not h.get(key):
                module.fail_json(msg=f"hosts: every entry needs {key}: {h.get('name', h)}")
    Sync(module).run()


if __name__ == "__main__":
    main()
