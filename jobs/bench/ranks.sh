# shellcheck shell=sh
# Sourced by the benchmarks that run several ranks on one node (offload_speed.sh, capacity.sh).
# rank_place NP: PLACE becomes the mpirun placement words. One rank keeps every core, unbound;
# several ranks each get their share of the node's cores, bound to them, and as many OpenMP
# threads (unless OMP_NUM_THREADS is set), so that each steps its own shard on its own cores
# beside its own GPU's PCIe link instead of every rank's threads contending for all the cores.
rank_place() {
    PLACE="--bind-to none"
    if [ "$1" -gt 1 ]; then
        per=$(( $(nproc) / $1 ))
        [ "$per" -ge 1 ] || per=1
        PLACE="--map-by slot:PE=$per --bind-to core"
        export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$per}"
    fi
    # mpirun warns about an -x variable that is not set
    [ -z "${OMP_NUM_THREADS:-}" ] || PLACE="$PLACE -x OMP_NUM_THREADS"
}
