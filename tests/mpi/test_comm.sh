#!/bin/sh
# A rank that reaches a broadcast late (or never) ends the job within the collective time limit,
# naming the rank and the broadcast, instead of holding the others: the config's bytes are
# broadcast during the setup (tests/unit/test_comm.c says how). Also `zinf config show` refuses a
# bad ZINF_COMM_TIMEOUT as train does (both start MPI and wait under that limit).
. "${top_srcdir:-.}/tests/mpi/lib.sh"
PROG="${top_builddir:-.}/tests/unit/test_comm"
[ -x "$PROG" ] || { echo "test_comm.sh: $PROG is not built (make check builds it)"; exit 77; }

t0=$(date +%s)
OUTPUT=$(timeout 120 "$MPIRUN" --oversubscribe -np 2 "$PROG" hang 2>&1); RC=$?
t1=$(date +%s)
expect_err "a broadcast with one rank 30 s late" "rank 1: timed out after" "waiting for a broadcast from rank 0"
[ $((t1 - t0)) -lt 25 ] && pass || fail "the job took $((t1 - t0)) s: the broadcast waited for the late rank"

OUTPUT=$(ZINF_COMM_TIMEOUT=10s "$ZINF" config show 2>&1); RC=$?
expect_err "config show with ZINF_COMM_TIMEOUT=10s" "ZINF_COMM_TIMEOUT=10s: expected a number of seconds >= 0"
OUTPUT=$(ZINF_COMM_TIMEOUT=2.5 "$ZINF" config show 2>&1); RC=$?
expect_ok "config show with ZINF_COMM_TIMEOUT=2.5"
OUTPUT=$(ZINF_COMM_TIMEOUT=10s "$ZINF" config --help 2>&1); RC=$?
expect_ok "config --help with a bad ZINF_COMM_TIMEOUT: help needs no time limit"

finish
