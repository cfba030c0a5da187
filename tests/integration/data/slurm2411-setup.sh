#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Inside a localhost/carme-node:debian13 container (tests/integration/test_slurmrestd_trixie.py): a one-node Slurm
# 24.11 (slurmctld, slurmd, slurmrestd with auth/jwt as the unprivileged user slurmrestd on :6820), no accounting,
# users alice (1001) and bob (1002). The JWT key is /etc/slurm/jwt_hs256.key (the test reads it back).
set -euo pipefail
host=$(hostname -s)
for u in alice:1001 bob:1002; do id "${u%%:*}" >/dev/null 2>&1 || useradd -m -u "${u##*:}" "${u%%:*}"; done
id slurmrestd >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin slurmrestd
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
chown slurm: /var/spool/slurmctld /var/log/slurm 2>/dev/null || true
[ -s /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; }
chown munge: /etc/munge/munge.key /run/munge; chmod 400 /etc/munge/munge.key
runuser -u munge -- /usr/sbin/munged
[ -s /etc/slurm/jwt_hs256.key ] || dd if=/dev/urandom of=/etc/slurm/jwt_hs256.key bs=32 count=1 status=none
chown slurm: /etc/slurm/jwt_hs256.key; chmod 600 /etc/slurm/jwt_hs256.key
cpus=$(nproc)
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=carmetest
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=1440 State=UP
PartitionName=long Nodes=$host MaxTime=INFINITE State=UP
CONF
/usr/sbin/slurmctld
/usr/sbin/slurmd
for _ in $(seq 60); do sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 0.5; done
sinfo -h -o %t | grep -q idle || { tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log; exit 1; }
# slurmrestd must not run as root or SlurmUser; auth/jwt only; without slurmdbd only openapi/slurmctld loads (24.11
# refuses to start otherwise: "Failure loading plugin path bindings")
SLURM_JWT=daemon setsid /usr/sbin/slurmrestd -u slurmrestd -g slurmrestd -a rest_auth/jwt \
  -s openapi/slurmctld 0.0.0.0:6820 \
  > /var/log/slurm/slurmrestd.log 2>&1 < /dev/null &
for _ in $(seq 60); do (exec 3<>/dev/tcp/127.0.0.1/6820) 2>/dev/null && break; sleep 0.5; done
sinfo -V
