#!/bin/bash
# Run inside a throwaway node container (tests/integration/test_slurmdbd_gap_trixie.py): MariaDB, munge and slurmdbd
# of the image's Debian, without systemd. MODE=dump (Debian 12, Slurm 22.05): create an accounting database with a
# cluster, an account with a budget and a user, and dump it to /x/acct.sql. MODE=load (Debian 13, Slurm 24.11): load
# that dump and start slurmdbd on it, its log in /x/slurmdbd-load.log.
set -eu
mkdir -p /run/mysqld /run/munge /var/log/slurm /run/slurm
chown mysql /run/mysqld; chown munge /run/munge; chown slurm /var/log/slurm /run/slurm
(mysqld_safe > /dev/null 2>&1 &)
for _ in $(seq 60); do mariadb -e 'select 1' > /dev/null 2>&1 && break; sleep 1; done
install -o munge -g munge -m 0400 /x/munge.key /etc/munge/munge.key
runuser -u munge -- /usr/sbin/munged --force
cat > /etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=gap-test
StorageLoc=slurm_acct_db
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurm/slurmdbd.pid
CONF
chown slurm /etc/slurm/slurmdbd.conf; chmod 0600 /etc/slurm/slurmdbd.conf
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=carme
SlurmctldHost=localhost
AuthType=auth/munge
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
NodeName=localhost CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=localhost
CONF
mariadb -e "create user 'slurm'@'localhost' identified by 'gap-test'; grant all on slurm_acct_db.* to 'slurm'@'localhost';"
if [ "$MODE" = dump ]; then
  /usr/sbin/slurmdbd -D > /x/slurmdbd-dump.log 2>&1 &
  for _ in $(seq 60); do sacctmgr -nP show cluster > /dev/null 2>&1 && break; sleep 1; done
  sacctmgr -i add cluster carme
  sacctmgr -i add account proj1 GrpTRESMins=cpu=120
  sacctmgr -i add user alice account=proj1
  sacctmgr -nP show assoc format=cluster,account,user,grptresmins > /x/assoc-22.05.txt
  mariadb -N slurm_acct_db -e "select version from convert_version_table" > /x/schema-22.05.txt
  kill %1; wait || true
  mariadb-dump --single-transaction --databases slurm_acct_db > /x/acct.sql
else
  mariadb < /x/acct.sql
  rc=0; timeout 120 /usr/sbin/slurmdbd -D > /x/slurmdbd-load.log 2>&1 || rc=$?
  echo "$rc" > /x/slurmdbd-load.rc
fi
