#!/bin/sh
# SPDX-License-Identifier: GPL-3.0-or-later
# keep_database.sh DB KEEP SOCKET: move every table of MariaDB database DB into database KEEP in one RENAME TABLE
# (atomic: all tables move or none; only the names change, no data is copied). MariaDB has no RENAME DATABASE.
# Prints "moved N", "kept" (DB has no tables, KEEP has: done before) or "empty"; fails when both have tables.
set -eu
db=$1 keep=$2 socket=$3
q() { mariadb --socket="$socket" -N -B -e "$1"; }
tables() {
  q "SELECT table_name FROM information_schema.tables WHERE table_schema='$1' AND table_type='BASE TABLE' ORDER BY 1"
}
old=$(tables "$db")
kept=$(tables "$keep")
if [ -z "$old" ]; then
  if [ -n "$kept" ]; then echo kept; else echo empty; fi
  exit 0
fi
if [ -n "$kept" ]; then
  echo "both $db and $keep hold tables: not moving $db over the kept copy (drop one by hand)" >&2
  exit 1
fi
q "CREATE DATABASE IF NOT EXISTS \`$keep\`"
pairs=$(printf '%s\n' "$old" | awk -v d="$db" -v k="$keep" '{printf "%s`%s`.`%s` TO `%s`.`%s`", (NR>1?", ":""), d, $1, k, $1}')
q "RENAME TABLE $pairs"
echo "moved $(printf '%s\n' "$old" | wc -l)"
