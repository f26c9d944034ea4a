#!/bin/bash
# Several hosts on one machine: each "host" is a network namespace with its own address, joined to
# the others by a veth pair to a bridge, and OpenMPI's rsh launcher reaches it through an agent
# script that stands in for ssh. Launched with zinf-launch from a DeepSpeed hostfile, a ZeRO-3 run
# on 2 hosts x 2 ranks saves a checkpoint to the file system every host sees, and a run on
# 3 hosts x 1 rank continues from it. Held against plain mpirun on one host: at the same world size
# the same bits (every logged loss and the parameter hash), at another world size the losses of the
# uninterrupted runs within 1e-5. Each rank ran in the namespace and under the hostname of the host
# the hostfile put it on, ranks on one host used shared memory and ranks on different hosts TCP,
# and at least the parameter shards the other hosts own crossed each host's veth.
# Needs root, ip (iproute2), unshare and hostname; exits 77 where they or namespaces are missing.
. "${top_srcdir:-.}/tests/mpi/lib.sh"
set -u
ME=$(basename "$0")
skip() { echo "$ME: skipped: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces need CAP_SYS_ADMIN)"
command -v ip > /dev/null || skip "no ip command (Debian package iproute2)"
command -v unshare > /dev/null || skip "no unshare command (util-linux)"
command -v hostname > /dev/null || skip "no hostname command"
unshare --uts true 2> /dev/null || skip "unshare --uts fails here (no UTS namespaces)"

# zinf-launch sits beside zinf in the build directory
LAUNCH=${ZINF_LAUNCH:-$(dirname "$ZINF")/zinf-launch}
[ -x "$LAUNCH" ] || { echo "FAIL: $LAUNCH is not built" >&2; exit 1; }
LAUNCH=$(cd "$(dirname "$LAUNCH")" && pwd)/$(basename "$LAUNCH")
ZINF=$(cd "$(dirname "$ZINF")" && pwd)/$(basename "$ZINF") # ranks start elsewhere: an absolute path

# ---- the cluster ----------------------------------------------------------------------------------
# Names carry this shell's PID, so parallel runs of the test never share a namespace, a hostname,
# or what OpenMPI names after the hostname (its per-job temporary directories, shared-memory
# segments). The
# addresses need no such care: they exist only inside this run's namespaces, so every run can use
# the same private /24, and the root namespace gets no address, route or link.
TAG=zmh$$
SW=$TAG-sw # the switch: holds the bridge, and mpirun runs here (the login node)
NET=10.213.7.0/24
addr() { echo "10.213.7.$((10 + $1))"; } # host i (1-3); the switch is .1
NSS=""                                     # the namespaces made so far, for cleanup
# waited FILE COMMAND...: COMMAND with its output in FILE and $OUTPUT, its status in $RC. Run in
# the background and waited for, because bash runs a trap only after a foreground command ends,
# and not at all for SIGINT when the command (mpirun) handles it and exits by itself: a Ctrl-C
# or a TERM from the harness must stop the test now, and clean up.
BG=""
waited() {
    local f=$1
    shift
    "$@" > "$f" 2>&1 &
    BG=$!
    wait "$BG"
    RC=$?
    BG=""
    OUTPUT=$(cat "$f")
}
cleanup() {
    local ns pids i
    trap - EXIT INT TERM
    # the command being waited for (in the root namespace, it is not in the list below)
    [ -n "$BG" ] && kill -TERM "$BG" 2> /dev/null && wait "$BG" 2> /dev/null
    # whatever still runs in our namespaces (mpirun, orted, zinf after a failure or a signal) is ours
    for ns in $NSS; do
        pids=$(ip netns pids "$ns" 2> /dev/null)
        [ -n "$pids" ] && kill -TERM $pids 2> /dev/null
    done
    for i in 1 2 3 4 5 6 7 8 9 10; do
        pids=""
        for ns in $NSS; do pids="$pids$(ip netns pids "$ns" 2> /dev/null)"; done
        [ -z "$pids" ] && break
        sleep 0.2
    done
    for ns in $NSS; do
        pids=$(ip netns pids "$ns" 2> /dev/null)
        [ -n "$pids" ] && kill -KILL $pids 2> /dev/null
    done
    # deleting a veth end deletes its peer; the bridge goes with the switch, but say so
    for i in 1 2 3; do ip -n "$SW" link del "p$i" 2> /dev/null; done
    ip -n "$SW" link del br0 2> /dev/null
    for ns in $NSS; do ip netns del "$ns" 2> /dev/null; done
    # a rank killed mid-run leaves its segment in /dev/shm; the name starts with its hostname
    rm -f /dev/shm/vader_segment."$TAG"-* 2> /dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT # exit runs the EXIT trap
trap 'exit 143' TERM

ip netns add "$SW" 2> /dev/null || skip "ip netns add fails here (no network namespaces)"
NSS=$SW
# ip netns exec remounts /sys for the namespace, which some containers forbid
ip netns exec "$SW" true 2> /dev/null || skip "ip netns exec fails here (cannot remount /sys?)"
die() { echo "$ME: $*" >&2; exit 1; } # a setup step that ought to work did not
ip -n "$SW" link set lo up || die "lo up in $SW"
ip -n "$SW" link add br0 type bridge 2> /dev/null || skip "the kernel makes no bridge devices here"
ip -n "$SW" addr add 10.213.7.1/24 dev br0 && ip -n "$SW" link set br0 up || die "br0 in $SW"
for i in 1 2 3; do
    ns=$TAG-h$i
    ip netns add "$ns" || die "ip netns add $ns"
    NSS="$NSS $ns"
    # made inside the switch with its far end put straight into the host: never in the root namespace
    ip -n "$SW" link add "p$i" type veth peer name eth0 netns "$ns" 2> /dev/null ||
        skip "the kernel makes no veth pairs here"
    ip -n "$SW" link set "p$i" master br0 up &&
        ip -n "$ns" addr add "$(addr $i)/24" dev eth0 &&
        ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || die "the link of $ns"
done

# The agent, in place of ssh. OpenMPI runs "AGENT HOST WORD..."; the words are one shell command
# (the orted line, its values with ';' or spaces already in quotes: "1234.0;tcp://10.213.7.1:5678"),
# so, as ssh does, it joins them with spaces and has a shell on the host parse them. On the host:
# - its network namespace;
# - its own UTS namespace and hostname: OpenMPI names its per-job temporary directories and
#   shared-memory segments after the hostname, so hosts that share one collide (their local rank 0s map the same
#   segment, and the job dies in vader with SIGSEGV);
# - an environment as bare as an ssh login's (PATH and the library path, as a login profile on a
#   cluster sets them), so that only what the launcher exports with -x reaches the ranks; TMPDIR
#   keeps orted's per-job temporary directory in this test's directory.
# An unknown host fails as ssh does, with 255.
AGENT=$TMP/agent
cat > "$AGENT" << EOF
#!/bin/sh
host=\$1
shift
case \$host in
$(for i in 1 2 3; do echo "$(addr $i)) ns=$TAG-h$i ;;"; done)
*) echo "agent: no host \$host" >&2; exit 255 ;;
esac
echo "\$host \$*" >> "$TMP/agent.log"
exec ip netns exec "\$ns" unshare --uts env -i PATH="\$PATH" HOME="\$HOME" TMPDIR="$TMP" \\
    \${LD_LIBRARY_PATH+"LD_LIBRARY_PATH=\$LD_LIBRARY_PATH"} \${OPAL_PREFIX+"OPAL_PREFIX=\$OPAL_PREFIX"} \\
    sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$ns" "\$*"
EOF
chmod +x "$AGENT"

# Each rank notes where it is before it becomes zinf: its network namespace, its hostname,
# OpenMPI's count of ranks on its node, and two variables that only the launcher's -x exports
# can have brought it through the agent's bare environment (ZINF_TEST_RUN also names the note).
WHERE=$TMP/where
mkdir -p "$TMP/place"
cat > "$WHERE" << EOF
#!/bin/sh
echo "\$(readlink /proc/self/ns/net) \$(hostname) \${OMPI_COMM_WORLD_LOCAL_SIZE-?} \${OMP_NUM_THREADS-unset}" \\
    > "$TMP/place/\${ZINF_TEST_RUN-unset}.\$OMPI_COMM_WORLD_RANK"
exec "\$@"
EOF
chmod +x "$WHERE"

# MCA settings of the runs across hosts: the agent goes on mpirun's command line through
# zinf-launch's --launcher_args; the rest as environment variables (mpirun passes OMPI_MCA_* on to
# orted and to the ranks): mpirun starts every orted itself (no tree of orteds starting orteds
# through the agent); TCP, of the daemons and of the ranks, only on the hosts' subnet;
# shared memory within a host and TCP between hosts, as on a cluster; btl_base_verbose 1 makes
# each rank say which btl it uses for each peer ("mca: bml: Using tcp btl for send to [[J,1],R]
# on node N"); the hosts' slots hide that 5 ranks share 2 cores, so ranks must yield when idle.
MCA="OMPI_MCA_plm_rsh_no_tree_spawn=1 OMPI_MCA_oob_tcp_if_include=$NET
 OMPI_MCA_btl_tcp_if_include=$NET OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_base_verbose=1
 OMPI_MCA_mpi_yield_when_idle=1"

# launch RUN HOSTFILE PROGRAM [ARGS...]: PROGRAM on the hosts of HOSTFILE through zinf-launch,
# started from the switch namespace; output in $OUTPUT, status in $RC
export MPIRUN # zinf-launch runs this mpirun
launch() {
    local run=$1 hf=$2
    shift 2
    # shellcheck disable=SC2086 # MCA is a list of words
    waited "$TMP/out.$run" env $MCA ZINF_TEST_RUN="$run" TMPDIR="$TMP" ip netns exec "$SW" "$LAUNCH" \
        --hostfile "$hf" --launcher_args "--mca plm_rsh_agent $AGENT" "$@"
}

# ---- the runs -----------------------------------------------------------------------------------
make_text "$TMP/add.txt" 3000
run data --input "$TMP/add.txt" --out "$TMP/add"
expect_ok "zinf data"
D="$TMP/add_train_*.bin"
# ZeRO-3, a global batch of 12 (the micro-batch from --per_device_train_batch_size, so one file
# serves every world size), AdamW with decay, clipping and warmup
cat > "$TMP/z3.json" << 'EOF'
{"train_batch_size": 12, "train_micro_batch_size_per_gpu": "auto", "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_max_lr": 0.003}},
 "zero_optimization": {"stage": 3}}
EOF
# targs NP OUT STEPS: zinf train's arguments for NP ranks, in TARGS
targs() {
    TARGS=(train --model test-mini --data "$D" --max_length 32 --max_steps "$3" --logging_steps 1
        --config "$TMP/z3.json" --per_device_train_batch_size $((12 / $1)) --out "$TMP/$2" --seed 5)
}
# one NP OUT STEPS [flags]: plain mpirun on this one host
one() {
    local np=$1 out=$2 steps=$3
    shift 3
    targs "$np" "$out" "$steps"
    waited "$TMP/one.$out" "$MPIRUN" --oversubscribe -np "$np" "$ZINF" "${TARGS[@]}" "$@"
    expect_ok "one host, $np ranks: $out"
}
# losses OUT FROM TO: the logged losses of steps FROM to TO, as written (a resumed run's file
# starts at its first new step)
losses() {
    sed -n 's/.*"step": \([0-9]*\), "loss": \([^,}]*\).*/\1 \2/p' "$TMP/$1/metrics.jsonl" 2> /dev/null |
        awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b { printf "%s ", $2 }'
}
phash() { sed -n 's/.*"params_hash": "\([0-9a-f]*\)".*/\1/p' "$TMP/$1/metrics.jsonl" 2> /dev/null | tail -1; }
rx() { ip netns exec "$1" cat /sys/class/net/eth0/statistics/rx_bytes; }

# the references, on one host: 12 steps uninterrupted on 4 and on 3 ranks; 6 steps on 4 ranks
# saved, and that checkpoint continued on 3 ranks
one 4 u4 12 --save_steps 0
one 3 u3 12 --save_steps 0
one 4 u4h 6 --save_steps 6
mkdir -p "$TMP/r3" && cp "$TMP/u4h/checkpoint-6.h5" "$TMP/r3/"
one 3 r3 12 --save_steps 0 --resume auto

# hostfile HOST:SLOTS...: a DeepSpeed hostfile, comments and blank lines included
hostfile() {
    echo "# $ME: hosts $*"
    for h in "$@"; do printf '\n%s slots=%s\n' "$(addr "${h%:*}")" "${h#*:}"; done
}
hostfile 1:2 2:2 > "$TMP/hosts.A"
hostfile 1:1 2:1 3:1 > "$TMP/hosts.B"

# multihost RUN NP STEPS PLAN [flags]: train on the hosts of $TMP/hosts.RUN into the shared
# directory; PLAN: the ranks per host zinf-launch ought to announce; the output in $TMP/out.RUN,
# what each host received on eth0 in $TMP/rx.RUN.I
multihost() {
    local run=$1 np=$2 steps=$3 plan=$4 i
    shift 4
    for i in 1 2 3; do rx "$TAG-h$i" > "$TMP/rx0.$run.$i"; done
    targs "$np" shared "$steps"
    launch "$run" "$TMP/hosts.$run" "$WHERE" "$ZINF" "${TARGS[@]}" "$@"
    expect_ok "$run: $np ranks on hosts $(sed -n 's/^# .*: hosts //p' "$TMP/hosts.$run")"
    expect_has "$run: zinf-launch's plan" "zinf-launch: $np ranks on $(grep -c slots "$TMP/hosts.$run") hosts: $plan"
    for i in 1 2 3; do echo $(($(rx "$TAG-h$i") - $(cat "$TMP/rx0.$run.$i"))) > "$TMP/rx.$run.$i"; done
    cp "$TMP/shared/metrics.jsonl" "$TMP/$run.metrics" 2> /dev/null
}

# A: 2 hosts x 2 ranks, 6 steps, saved
multihost A 4 6 "$(addr 1):0,1 $(addr 2):0,1" --save_steps 6
want=$(losses u4 1 6)
[ -n "$want" ] && [ "$(losses shared 1 6)" = "$want" ] && pass ||
    fail "A: losses $(losses shared 1 6), 4 ranks on one host $want"
[ -n "$(phash u4h)" ] && [ "$(phash shared)" = "$(phash u4h)" ] && pass ||
    fail "A: parameter hash '$(phash shared)', 4 ranks on one host '$(phash u4h)'"
[ "$(cat "$TMP/shared/latest" 2> /dev/null)" = checkpoint-6.h5 ] && pass || fail "A: latest is not checkpoint-6.h5"

# B: 3 hosts x 1 rank continue A's checkpoint to step 12
multihost B 3 12 "$(addr 1):0 $(addr 2):0 $(addr 3):0" --save_steps 0 --resume auto
expect_has "B" "resumed from $TMP/shared/checkpoint-6.h5 after step 6"
[ "$(metric "$TMP/shared/metrics.jsonl" step | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 10 11 12 " ] && pass ||
    fail "B: metrics.jsonl steps $(metric "$TMP/shared/metrics.jsonl" step | tr '\n' ' ')"
# the same world size continuing the same state: the same bits
want=$(losses r3 7 12)
[ -n "$want" ] && [ "$(losses shared 7 12)" = "$want" ] && pass ||
    fail "B: losses $(losses shared 7 12), 3 ranks on one host from the same step 6 $want"
[ -n "$(phash r3)" ] && [ "$(phash shared)" = "$(phash r3)" ] && pass ||
    fail "B: parameter hash '$(phash shared)', 3 ranks on one host '$(phash r3)'"
# the uninterrupted runs at either world size: the reductions sum in another order, so the
# trajectories part by rounding only; test_ckpt.sh holds a restart at another world size to the
# same 1e-5 (relative)
for ref in u4 u3; do
    got=$(losses shared 7 12) want=$(losses "$ref" 7 12) ok=1
    for i in 1 2 3 4 5 6; do
        a=$(echo "$got" | cut -d' ' -f$i) b=$(echo "$want" | cut -d' ' -f$i)
        [ -n "$a" ] && [ -n "$b" ] && close "$a" "$b" 1e-5 || ok=0
    done
    [ "$ok" = 1 ] && pass || fail "B: losses $got; uninterrupted on one host ($ref) $want"
done

# ---- where the ranks ran, and how they talked ---------------------------------------------------
inode() { stat -L -c %i "/run/netns/$1"; }
# placement RUN NP HOST... : rank r ran on host HOST[r] (a number): in that host's namespace,
# under its hostname, with as many ranks on its node as the host has, and the -x variables
placement() {
    local run=$1 np=$2 r h f net name lsize omp n x
    shift 2
    local hosts=("$@")
    for ((r = 0; r < np; r++)); do
        h=$TAG-h${hosts[r]}
        f=$TMP/place/$run.$r
        [ -f "$f" ] || { fail "$run: rank $r left no note (ZINF_TEST_RUN did not reach it)"; continue; }
        read -r net name lsize omp < "$f"
        n=0
        for x in "${hosts[@]}"; do [ "$x" = "${hosts[r]}" ] && n=$((n + 1)); done
        [ "$net" = "net:[$(inode "$h")]" ] && pass || fail "$run: rank $r ran in $net, not in $h's namespace"
        [ "$name" = "$h" ] && pass || fail "$run: rank $r ran under hostname $name, not $h"
        [ "$lsize" = "$n" ] && pass || fail "$run: rank $r has $lsize ranks on its node, $h has $n"
        [ "$omp" = "${OMP_NUM_THREADS}" ] && pass || fail "$run: rank $r has OMP_NUM_THREADS=$omp"
    done
    n=$(find "$TMP/place" -name "$run.*" | wc -l)
    [ "$n" = "$np" ] && pass || fail "$run: $n notes for $np ranks"
}
placement A 4 1 1 2 2
placement B 3 1 2 3
# C: a slot other than 0 on host 1 gives each host its own app context, and OpenMPI applies -x
# to its context only: every context must carry the exports (ZINF_TEST_RUN, OMP_NUM_THREADS)
launch C "$TMP/hosts.A" --exclude "$(addr 1):0" "$WHERE" true
expect_ok "C: --exclude $(addr 1):0"
expect_has "C: zinf-launch's plan" "zinf-launch: 3 ranks on 2 hosts: $(addr 1):1 $(addr 2):0,1"
placement C 3 1 2 2

# btls RUN HOST...: every "Using X btl for send to [[J,1],R]" line of RUN's ranks says tcp when
# rank R is on another host than the sender and vader when on the same, and every host sent over
# TCP. (The line names the sender by hostname; the peer by rank, whose host the notes tell.)
btls() {
    local run=$1 bad=0 sender btl peer peerhost h
    shift
    local hosts=("$@")
    declare -A tcp_from=()
    while read -r sender btl peer; do
        [ "$btl" = self ] && continue
        peerhost=$TAG-h${hosts[peer]}
        if [ "$sender" = "$peerhost" ]; then
            [ "$btl" = vader ] || { bad=1; echo "$run: $sender uses $btl to rank $peer on the same host" >&2; }
        else
            [ "$btl" = tcp ] || { bad=1; echo "$run: $sender uses $btl to rank $peer on $peerhost" >&2; }
            tcp_from[$sender]=1
        fi
    done < <(sed -n 's/^\[\([^:]*\):[0-9]*\] mca: bml: Using \([a-z]*\) btl for send to \[\[[0-9]*,[0-9]*\],\([0-9]*\)\].*/\1 \2 \3/p' \
        "$TMP/out.$run")
    [ "$bad" = 0 ] && pass || fail "$run: a btl other than tcp between hosts, or other than vader within one"
    for h in $(printf '%s\n' "${hosts[@]}" | sort -u); do
        [ -n "${tcp_from[$TAG-h$h]-}" ] && pass || fail "$run: $TAG-h$h reports no peer reached over tcp"
    done
}
btls A 1 1 2 2
btls B 1 2 3

# What crossed the wire. At stage 3 a rank updates only its own shard of each unit, and the next
# forward needs every unit whole, so after each step but the last a host must receive the shards
# its ranks do not own: (world - ranks on the host) x shard bytes (mem_param_shard: a rank's
# shards of all units). Shared memory between hosts would leave the veths nearly idle.
veth() {
    local run=$1 np=$2 steps=$3 shard i got need
    shift 3
    local per=("$@") # ranks on host 1, 2, 3
    shard=$(metric "$TMP/$run.metrics" mem_param_shard | tr -d ' ' | tail -1)
    for i in 1 2 3; do
        [ "${per[i - 1]}" -gt 0 ] || continue
        got=$(cat "$TMP/rx.$run.$i")
        need=$(((steps - 1) * (np - per[i - 1]) * ${shard:-0}))
        [ -n "$shard" ] && [ "$got" -ge "$need" ] && pass ||
            fail "$run: $TAG-h$i received $got bytes on eth0, fewer than the $need of the shards it lacks"
    done
}
veth A 4 6 2 2 0
veth B 3 6 1 1 1

# the agent was asked once for each host of each run, for an orted, and each orted went away
# with its job (OpenMPI may ask for the hosts of a run in any order)
want=$(printf '%s orted\n' "$(addr 1)" "$(addr 2)" "$(addr 1)" "$(addr 2)" "$(addr 3)" "$(addr 1)" "$(addr 2)" |
    sort | tr '\n' ' ')
got=$(awk '{ print $1, ($2 ~ /orted$/ ? "orted" : $2) }' "$TMP/agent.log" | sort | tr '\n' ' ')
[ "$got" = "$want" ] && pass || fail "the agent was asked for: $got; want $want"
for i in 1 2 3 4 5 6 7 8 9 10; do
    left=""
    for h in 1 2 3; do left="$left$(ip netns pids "$TAG-h$h")"; done
    [ -z "$left" ] && break
    sleep 0.2
done
[ -z "$left" ] && pass || fail "processes left on the hosts 2 s after the runs: $left"

finish
