# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's Zabbix client (webui/monitoring/zabbix.py, copied next to this file) against this scenario's Zabbix.

Run on the head with the zabbix-utils virtualenv's Python while slurmd is stopped on node1. Prints the snapshot as
JSON and exits 1 unless it holds head and node1 with their agent value, and node1's slurmd problem.
Usage: portal_health_check.py URL CA_FILE (the API user's password on stdin).
"""

import json
import sys
import time

import zabbix

config = {"ZABBIX_URL": sys.argv[1], "ZABBIX_CA_FILE": sys.argv[2], "ZABBIX_USER": "carme-api",
          "ZABBIX_PASSWORD": sys.stdin.read().strip()}
health = zabbix.parse_hosts(zabbix.ZabbixSource(config).hosts(), time.time())
out = {"error": health.error,
       "hosts": {n: {"values": {v.label: v.value for v in h.values}, "problems": [p.name for p in h.problems]}
                 for n, h in health.hosts.items()}}
print(json.dumps(out, indent=1))
hosts = out["hosts"]
ok = (health.error is None and set(hosts) == {"head", "node1"}
      and all(h["values"].get("Agent") == "1" for h in hosts.values())
      and "slurmd is not running on node1" in hosts["node1"]["problems"])
sys.exit(0 if ok else 1)
