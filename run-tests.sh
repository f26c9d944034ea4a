#!/bin/sh
# The whole test suite: install what is missing (as root), build, and run `make check`
# (unit tests and MPI tests on the CPU backend). Usage: ./run-tests.sh [configure flags]
set -eu
cd "$(dirname "$0")"
sh jobs/install-deps.sh
[ -x configure ] || ./autogen.sh >/dev/null
[ -f Makefile ] || ./configure "$@" >/dev/null
make -j"$(nproc)" >/dev/null
status=0
make -j"$(nproc)" check || status=$?
# the summary line the test harness counts, from Automake's test-suite.log
if [ -f test-suite.log ]; then
    awk '/^# PASS:/ {p=$3} /^# FAIL:/ {f=$3} /^# SKIP:/ {s=$3} /^# ERROR:/ {e=$3}
         END { printf "%d passed, %d failed, %d skipped\n", p, f + e, s }' test-suite.log
    [ "$status" -eq 0 ] || cat test-suite.log | tail -80
fi
exit "$status"
