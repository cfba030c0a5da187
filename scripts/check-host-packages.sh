#!/usr/bin/env bash
# The fresh-machine proof for scripts/host-packages.txt, without a second machine: every program the test bed, the
# demo and the tests use must come from the dependency closure of the manifest (apt, no recommends, as host-setup
# installs it) or from Debian's "required" base that every Debian 12 host has. A program that is here only because
# something else installed it (netavark, aardvark-dns and iptables were, once) fails this check, whatever is
# installed on this machine. Run by .ci/run after host-setup; seconds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t manifest < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/host-packages.txt" | grep -v '^$')

# what the project runs on the host (programs and plugins), by path
programs=(
  /usr/bin/podman /usr/sbin/runc /usr/lib/podman/netavark /usr/lib/podman/aardvark-dns /usr/sbin/iptables
  /usr/bin/newuidmap /usr/sbin/debootstrap /usr/bin/make /usr/bin/chromium /usr/bin/curl /usr/bin/nsenter
  /usr/sbin/munged /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/slurmdbd /usr/sbin/slurmrestd /usr/bin/sbatch
  /usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so /usr/lib/x86_64-linux-gnu/slurm-wlm/accounting_storage_mysql.so
  /usr/sbin/mariadbd /usr/bin/mariadb-install-db /usr/sbin/slapd /usr/bin/ldapsearch /usr/sbin/slappasswd
  /usr/sbin/sshd /usr/lib/x86_64-linux-gnu/libnss_myhostname.so.2
  /usr/bin/dpkg-scanpackages /usr/bin/openssl /usr/bin/ssh-keygen /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
)

# What apt would install on a pristine Debian 12 host (the "required" packages and their dependencies, as in
# debootstrap's minbase):
# simulated against a dpkg status that holds just those packages, exactly as host-setup runs apt (no recommends).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - /var/lib/dpkg/status "$work/status" << 'PYEOF'
import re, sys
stanzas = {}
for text in open(sys.argv[1], encoding="utf-8").read().split("\n\n"):
    fields = dict(re.findall(r"^([A-Za-z-]+): (.*)$", text, re.M))
    if fields.get("Status") == "install ok installed":
        stanzas[fields["Package"]] = (text, fields)
# minbase: the required packages and what they depend on (as installed here)
base = {name for name, (_t, f) in stanzas.items() if f.get("Priority") == "required"}
todo = list(base)
while todo:
    _text, fields = stanzas[todo.pop()]
    deps = ", ".join(fields.get(k, "") for k in ("Depends", "Pre-Depends"))
    for alternative in filter(None, (d.strip() for d in deps.split(","))):
        for option in alternative.split("|"):
            name = option.split()[0].split(":")[0] if option.split() else ""
            if name in stanzas:
                if name not in base:
                    base.add(name)
                    todo.append(name)
                break
open(sys.argv[2], "w", encoding="utf-8").write("\n\n".join(stanzas[n][0].strip() for n in sorted(base)) + "\n")
print("\n".join(sorted(base)), file=open(sys.argv[2] + ".names", "w", encoding="utf-8"))
PYEOF
closure=$work/closure
{
  apt-get -s -q -o Dir::State::status="$work/status" -o Debug::NoLocking=1 install --no-install-recommends \
    "${manifest[@]}" 2> "$work/apt.err" | awk '$1 == "Inst" {print $2}'
  cat "$work/status.names"
} | sort -u > "$closure"
if [ ! -s "$closure" ] || grep -q '^E:' "$work/apt.err"; then
  echo "check-host-packages: apt could not simulate the install: $(cat "$work/apt.err")" >&2
  exit 1
fi

missing=0
for path in "${programs[@]}"; do
  path=$(readlink -f "$path" || echo "$path") # alternatives (iptables, slurmctld) -> the real file
  owner=$(dpkg-query -S "$path" 2> /dev/null | head -1 | cut -d: -f1) || true
  if [ -z "$owner" ]; then
    echo "check-host-packages: $path is not installed (run scripts/host-setup.sh)" >&2
    missing=1
  elif ! grep -qx "$owner" "$closure"; then
    echo "check-host-packages: $path comes from '$owner', which scripts/host-packages.txt does not bring in" \
      "(not in the manifest's dependency closure without recommends): add it to the manifest" >&2
    missing=1
  fi
done
[ "$missing" = 0 ] || exit 1
echo "check-host-packages: all ${#programs[@]} programs come from the manifest's closure ($(wc -l < "$closure") packages)"
