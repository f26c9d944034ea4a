#!/bin/sh
# Launch zinf train on the hosts of a DeepSpeed/OpenMPI-style hostfile ("host slots=N" lines;
# hostfile.example and hostfile.localhost beside this script are examples).
# Usage: jobs/mpirun/train.sh HOSTFILE [zinf train flags...]
# The number of ranks is the sum of the slots; each node's ranks pick GPUs by local rank.
# Plain mpirun: the DeepSpeed-style launcher zinf-launch will take this over once it is released.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 HOSTFILE [zinf train flags]" >&2; exit 2; }
hostfile=$1; shift
[ -r "$hostfile" ] || { echo "zinf: hostfile $hostfile: not readable" >&2; exit 1; }
np=$(awk '!/^[[:space:]]*(#|$)/ { n = 1; for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) { sub(/^slots=/, "", $i); n = $i }
          if (n !~ /^[0-9]+$/ || n < 1) { printf "zinf: %s:%d: bad slots\n", FILENAME, NR > "/dev/stderr"; exit 1 } s += n }
          END { print s + 0 }' "$hostfile")
[ "$np" -gt 0 ] || { echo "zinf: hostfile $hostfile names no hosts" >&2; exit 1; }
here=$(cd "$(dirname "$0")/../.." && pwd)
# the thread counts and search paths reach the ranks on the other hosts; only those that are set,
# since mpirun warns about each -x variable that is not
xs=""
for v in OMP_NUM_THREADS OPENBLAS_NUM_THREADS PATH LD_LIBRARY_PATH; do
    eval "[ -z \"\${$v+set}\" ]" || xs="$xs -x $v"
done
# shellcheck disable=SC2086 # $xs is "-x NAME" words
exec mpirun -np "$np" --hostfile "$hostfile" --bind-to none $xs "${ZINF:-$here/zinf}" train "$@"
