"""The portal's Zabbix client (webui/monitoring.py, copied next to this file) against the real Zabbix of this scenario.

Run on the head with the zabbix-utils virtualenv's Python while slurmd is stopped on node1. Prints the snapshot as
JSON and exits 1 unless it holds head and node1 with their agent value, and node1's slurmd problem.
Usage: portal_health_check.py URL CA_FILE (the API user's password on stdin).
"""

import json
import sys

import monitoring

config = {"ZABBIX_URL": sys.argv[1], "ZABBIX_CA_FILE": sys.argv[2], "ZABBIX_USER": "carme-api",
          "ZABBIX_PASSWORD": sys.stdin.read().strip()}
health = monitoring.from_config(config).get()
out = {"error": health.error,
       "hosts": {n: {"values": {v.label: v.value for v in h.values}, "problems": [p.name for p in h.problems]}
                 for n, h in health.hosts.items()}}
print(json.dumps(out, indent=1))
hosts = out["hosts"]
ok = (health.error is None and set(hosts) == {"head", "node1"}
      and all(h["values"].get("Agent") == "1" for h in hosts.values())
      and "slurmd is not running on node1" in hosts["node1"]["problems"])
sys.exit(0 if ok else 1)
