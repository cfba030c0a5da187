#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Inside a localhost/carme-node:debian13 container (tests/integration/test_exclusive_limits_trixie.py): a one-node
# Slurm 24.11 with accounting (MariaDB, slurmdbd), 4 fake GPUs (/dev/nvidia[0-3], --cap-add MKNOD), limits enforced
# as the slurm role sets them, and the role's job_submit.lua, rendered by the test into /lua. User bob (1002) in
# account research, QOS exc-narrow (2 GPUs per user, his default) and exc-wide (4), both Flags=DenyOnLimit.
set -euo pipefail
host=$(hostname -s)
id bob >/dev/null 2>&1 || useradd -m -u 1002 bob
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /run/mysqld
chown slurm: /var/spool/slurmctld /var/log/slurm
chown mysql: /run/mysqld
for i in 0 1 2 3; do [ -e /dev/nvidia$i ] || mknod -m 666 /dev/nvidia$i c 195 $i; done
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown munge: /etc/munge/munge.key /run/munge; chmod 400 /etc/munge/munge.key
runuser -u munge -- /usr/sbin/munged

mariadb-install-db --user=mysql --auth-root-authentication-method=socket >/dev/null
setsid /usr/sbin/mariadbd --user=mysql --skip-networking=0 --bind-address=127.0.0.1 >/var/log/mariadb.log 2>&1 < /dev/null &
for _ in $(seq 60); do mariadb -e 'select 1' >/dev/null 2>&1 && break; sleep 0.5; done
mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'test-only';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"

cat > /etc/slurm/slurmdbd.conf <<CONF
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

cpus=$(nproc)
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=carmelimits
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$host
AccountingStorageEnforce=associations,limits,qos,safe
AccountingStorageTRES=gres/gpu
EnforcePartLimits=ALL
JobSubmitPlugins=lua
GresTypes=gpu
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=2000 Gres=gpu:fake:4 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=60 DefaultTime=60 State=UP
CONF
echo "NodeName=$host Name=gpu Type=fake File=/dev/nvidia[0-3]" > /etc/slurm/gres.conf
install -m 644 /lua/job_submit.lua /etc/slurm/job_submit.lua

sacctmgr -i add cluster carmelimits >/dev/null
/usr/sbin/slurmctld   # registers the gres/gpu TRES (AccountingStorageTRES) that the QOS below name
for _ in $(seq 60); do sacctmgr -n list tres type=gres 2>/dev/null | grep -q gpu && break; sleep 0.5; done
sacctmgr -i add qos exc-narrow Flags=DenyOnLimit MaxTRESPerUser=gres/gpu=2 >/dev/null
sacctmgr -i add qos exc-wide Flags=DenyOnLimit MaxTRESPerUser=gres/gpu=4 >/dev/null
sacctmgr -i add account research Cluster=carmelimits >/dev/null
sacctmgr -i add user bob Account=research QOS=normal,exc-narrow,exc-wide DefaultQOS=exc-narrow \
  GrpTRES=gres/gpu=4 >/dev/null
/usr/sbin/slurmd
for _ in $(seq 60); do sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 0.5; done
sinfo -h -o %t | grep -q idle || { tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log; exit 1; }
sinfo -V
