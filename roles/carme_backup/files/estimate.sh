# carme_backup preflight: this host's estimated set size and the free space where the set goes.
# Arguments: backup dir, MariaDB socket, then one KIND=TARGET per part (mysql=DB, dir=PATH, slapd=CONFIG_DIR,
# sacct=SINCE: 2 KiB per job of the accounting since then, more than its gzipped sacct --json measured, about 1 KiB).
dir=$1; sock=$2; shift 2
total=0
for part in "$@"; do
  kind=${part%%=*}; target=${part#*=}; bytes=""
  case $kind in
    mysql) bytes=$(mariadb --socket="$sock" -N -B -e "SELECT COALESCE(SUM(data_length + index_length), 0)
             FROM information_schema.tables WHERE table_schema = '$target'" 2>/dev/null) ;;
    dir) bytes=$(du -sb "$target" 2>/dev/null | cut -f1) ;;
    slapd) bytes=$(du -sbc "$target" $(sed -n 's/^olcDbDirectory: //p' "$target"/cn=config/olcDatabase=*.ldif \
             2>/dev/null) 2>/dev/null | tail -1 | cut -f1) ;;
    sacct) jobs=$(sacct -n -X -a --duplicates -S "$target" -E now -o jobid 2>/dev/null) \
             && bytes=$(( $(printf '%s\n' "$jobs" | grep -c .) * 2048 )) ;;
    slurm_usage) bytes=1048576 ;;  # the usage record: a line per association, 1 MiB is more than 10000 make
  esac
  if [ -z "$bytes" ]; then echo "problem part $kind $target: cannot measure it"; continue; fi
  echo "info size $kind=$target $bytes"
  total=$((total + bytes))
done
d=$dir; while [ ! -e "$d" ]; do d=$(dirname "$d"); done
echo "estimate $total"
echo "free $(df -PB1 "$d" | awk 'NR == 2 {print $4}')"
echo "fs $d"
