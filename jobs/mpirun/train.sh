#!/bin/sh
# Launch zinf train on the hosts of a DeepSpeed/OpenMPI-style hostfile ("host slots=N" lines;
# hostfile.example and hostfile.localhost beside this script are examples), one rank per slot.
# Usage: jobs/mpirun/train.sh HOSTFILE [zinf train flags...]
# zinf-launch reads the hostfile, prints the mpirun command and runs it (zinf-launch(1)); its
# --include/--exclude/--num_nodes/--num_gpus pick hosts and GPUs where this script takes them all.
# ZINF names the zinf binary (default: the one built at the top of this tree); the zinf-launch
# beside it is used, else the one on PATH.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 HOSTFILE [zinf train flags]" >&2; exit 2; }
hostfile=$1; shift
here=$(cd "$(dirname "$0")/../.." && pwd)
zinf=${ZINF:-$here/zinf}
launch=$(dirname "$zinf")/zinf-launch
[ -x "$launch" ] || launch="zinf-launch"
exec "$launch" --hostfile "$hostfile" "$zinf" train "$@"
