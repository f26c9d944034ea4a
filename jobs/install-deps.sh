#!/bin/sh
# Install the Debian 12 packages zinf builds and tests with, when any is missing. As root it runs
# apt-get; otherwise it names what to install and fails.
# Optional extras, installed only as root and never a failure: Slurm and munge, for
# tests/mpi/test_slurm.sh, which runs the jobs/slurm scripts on a private one-node cluster (it is
# skipped without them).
set -eu
# iproute2: tests/mpi/test_multihost.sh builds hosts from network namespaces
# libpcre2-dev and libutf8proc-dev: the tokenizer's regex and NFC
# python3-venv: tests/tok/test_tok.sh installs its reference, tokenizers, into a venv
# man-db and groff-base: tests/mpi/test_docs.sh renders every man page and fails on a warning
PKGS="build-essential autoconf automake libtool pkg-config openmpi-bin libopenmpi-dev liburing-dev libhdf5-openmpi-dev libjansson-dev libpcre2-dev libutf8proc-dev libopenblas-dev python3-venv man-db groff-base iproute2"
EXTRAS="slurmctld slurmd slurm-client munge"
# missing PKG...: those of the packages that are not installed, each after a space
missing() {
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || printf ' %s' "$p"
    done
}
# shellcheck disable=SC2086 # package lists are words
need=$(missing $PKGS)
if [ "$(id -u)" -ne 0 ]; then
    [ -z "$need" ] && exit 0
    echo "zinf: missing Debian packages:$need" >&2
    echo "zinf: install them with: sudo apt-get install$need" >&2
    exit 1
fi
# shellcheck disable=SC2086
extra=$(missing $EXTRAS)
[ -z "$need$extra" ] && exit 0
export DEBIAN_FRONTEND=noninteractive
if [ -n "$need" ]; then
    echo "zinf: installing$need"
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
if [ -n "$extra" ]; then
    echo "zinf: installing the optional$extra (for tests/mpi/test_slurm.sh)"
    # a package whose service cannot start here (no systemd) still installs: invoke-rc.d says so
    # shellcheck disable=SC2086
    { [ -n "$need" ] || apt-get update -qq; } && apt-get install -y -qq --no-install-recommends $extra >/dev/null 2>&1 ||
        echo "zinf: could not install$extra; test_slurm.sh will be skipped" >&2
fi
exit 0
