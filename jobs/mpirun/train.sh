#!/bin/sh
# Launch zinf train on the hosts of a DeepSpeed/OpenMPI-style hostfile ("host slots=N" lines).
# Usage: jobs/mpirun/train.sh HOSTFILE [zinf train flags...]
# The number of ranks is the sum of the slots; each node's ranks pick GPUs by local rank.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 HOSTFILE [zinf train flags]" >&2; exit 2; }
hostfile=$1; shift
[ -r "$hostfile" ] || { echo "zinf: hostfile $hostfile: not readable" >&2; exit 1; }
np=$(awk '!/^[[:space:]]*(#|$)/ { n = 1; for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) { sub(/^slots=/, "", $i); n = $i }
          if (n !~ /^[0-9]+$/ || n < 1) { printf "zinf: %s:%d: bad slots\n", FILENAME, NR > "/dev/stderr"; exit 1 } s += n }
          END { print s + 0 }' "$hostfile")
[ "$np" -gt 0 ] || { echo "zinf: hostfile $hostfile names no hosts" >&2; exit 1; }
here=$(cd "$(dirname "$0")/../.." && pwd)
exec mpirun -np "$np" --hostfile "$hostfile" --bind-to none -x OMP_NUM_THREADS -x PATH -x LD_LIBRARY_PATH \
    "${ZINF:-$here/zinf}" train "$@"
