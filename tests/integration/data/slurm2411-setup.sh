#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Inside a localhost/carme-node:debian13 container (tests/fixtures/slurm2411.py): a one-node Slurm 24.11 (slurmctld,
# slurmd; cluster carmetest, the node named after the container's hostname), users alice (1001) and bob (1002).
# One argument says what else:
#   restd   slurmrestd with auth/jwt as the unprivileged user slurmrestd on :6820, no accounting; the JWT key is
#           /etc/slurm/jwt_hs256.key (the test reads it back). tests/integration/test_slurmrestd_trixie.py
#   limits  accounting (MariaDB, slurmdbd), 4 fake GPUs (/dev/nvidia[0-3], needs --cap-add MKNOD, each bound to a
#           core), limits enforced as the slurm role sets them, and the role's job_submit.lua from /lua where one is
#           mounted. bob in account research, QOS exc-narrow (2 GPUs per user, his default) and exc-wide (4), both
#           Flags=DenyOnLimit; alice in research without QOS of her own.
#           tests/integration/test_exclusive_limits_trixie.py, tests/integration/test_reservations_trixie.py
set -euo pipefail
mode=${1:-}
case $mode in restd | limits) ;; *) echo "usage: $0 restd|limits" >&2; exit 2 ;; esac
host=$(hostname -s)
cpus=$(nproc)
cluster=carmetest

prepare() {
  for u in alice:1001 bob:1002; do id "${u%%:*}" >/dev/null 2>&1 || useradd -m -u "${u##*:}" "${u%%:*}"; done
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
  chown slurm: /var/spool/slurmctld /var/log/slurm
  [ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  chown munge: /etc/munge/munge.key /run/munge; chmod 400 /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged
}

start_slurmdbd() {
  mkdir -p /run/mysqld; chown mysql: /run/mysqld
  mariadb-install-db --user=mysql --auth-root-authentication-method=socket >/dev/null
  setsid /usr/sbin/mariadbd --user=mysql --skip-networking=0 --bind-address=127.0.0.1 \
    >/var/log/mariadb.log 2>&1 </dev/null &
  for _ in $(seq 60); do mariadb -e 'select 1' >/dev/null 2>&1 && break; sleep 0.5; done
  mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'test-only';
              GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
  cat >/etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=$host
SlurmUser=slurm
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=test-only
StorageLoc=slurm_acct_db
CONF
  chown slurm: /etc/slurm/slurmdbd.conf; chmod 600 /etc/slurm/slurmdbd.conf
  # The first slurmdbd start on a new MariaDB 11.8 database has failed here once with "fatal:
  # _check_mysql_concat_is_sane: null result" and started on the next try: up to 3 tries
  for _ in 1 2 3; do
    /usr/sbin/slurmdbd
    for _ in $(seq 20); do (exec 3<>/dev/tcp/127.0.0.1/6819) 2>/dev/null && break 2; sleep 0.5; done
  done
}

# The lines of slurm.conf only one mode has
restd_conf() {
  [ -s /etc/slurm/jwt_hs256.key ] || dd if=/dev/urandom of=/etc/slurm/jwt_hs256.key bs=32 count=1 status=none
  chown slurm: /etc/slurm/jwt_hs256.key; chmod 600 /etc/slurm/jwt_hs256.key
  cat <<CONF
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=1440 State=UP
PartitionName=long Nodes=$host MaxTime=INFINITE State=UP
CONF
}

limits_conf() {
  for i in 0 1 2 3; do [ -e /dev/nvidia$i ] || mknod -m 666 /dev/nvidia$i c 195 $i; done
  # Each GPU bound to one core, as real nodes report (gres.conf Cores=, or AutoDetect): without it Slurm 24.11 keeps
  # other GPU jobs off a node that holds a GPU reservation. slurm.conf names CPUs only: one core per socket
  for i in 0 1 2 3; do echo "NodeName=$host Name=gpu Type=fake File=/dev/nvidia$i Cores=$((i % cpus))"; done \
    >/etc/slurm/gres.conf
  if [ -s /lua/job_submit.lua ]; then
    install -m 644 /lua/job_submit.lua /etc/slurm/job_submit.lua
    echo JobSubmitPlugins=lua
  fi
  cat <<CONF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$host
AccountingStorageEnforce=associations,limits,qos,safe
AccountingStorageTRES=gres/gpu
EnforcePartLimits=ALL
GresTypes=gpu
NodeName=$host CPUs=$cpus RealMemory=2000 Gres=gpu:fake:4 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=60 DefaultTime=60 State=UP
CONF
}

write_slurm_conf() {
  cat >/etc/slurm/slurm.conf <<CONF
ClusterName=$cluster
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
CONF
  "${mode}_conf" >>/etc/slurm/slurm.conf
}

# After slurmctld registered the gres/gpu TRES (AccountingStorageTRES) that the QOS name
add_limits() {
  for _ in $(seq 60); do sacctmgr -n list tres type=gres 2>/dev/null | grep -q gpu && break; sleep 0.5; done
  sacctmgr -i add qos exc-narrow Flags=DenyOnLimit MaxTRESPerUser=gres/gpu=2 >/dev/null
  sacctmgr -i add qos exc-wide Flags=DenyOnLimit MaxTRESPerUser=gres/gpu=4 >/dev/null
  sacctmgr -i add account research Cluster=$cluster >/dev/null
  sacctmgr -i add user bob Account=research QOS=normal,exc-narrow,exc-wide DefaultQOS=exc-narrow \
    GrpTRES=gres/gpu=4 >/dev/null
  sacctmgr -i add user alice Account=research >/dev/null
}

# slurmrestd must not run as root or SlurmUser; auth/jwt only; without slurmdbd only openapi/slurmctld loads (24.11
# refuses to start otherwise: "Failure loading plugin path bindings")
start_slurmrestd() {
  id slurmrestd >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin slurmrestd
  SLURM_JWT=daemon setsid /usr/sbin/slurmrestd -u slurmrestd -g slurmrestd -a rest_auth/jwt \
    -s openapi/slurmctld 0.0.0.0:6820 >/var/log/slurm/slurmrestd.log 2>&1 </dev/null &
  for _ in $(seq 60); do (exec 3<>/dev/tcp/127.0.0.1/6820) 2>/dev/null && break; sleep 0.5; done
}

# (if, not &&: a function called on the left of && runs without set -e)
prepare
if [ "$mode" = limits ]; then start_slurmdbd; fi
write_slurm_conf
if [ "$mode" = limits ]; then sacctmgr -i add cluster $cluster >/dev/null; fi
/usr/sbin/slurmctld
if [ "$mode" = limits ]; then add_limits; fi
/usr/sbin/slurmd
for _ in $(seq 60); do sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 0.5; done
sinfo -h -o %t | grep -q idle || { tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log; exit 1; }
if [ "$mode" = restd ]; then start_slurmrestd; fi
sinfo -V
