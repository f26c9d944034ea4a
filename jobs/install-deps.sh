#!/bin/sh
# Install the Debian 12 packages zinf builds and tests with, when any is missing. As root it runs
# apt-get; otherwise it names what to install and fails.
set -eu
# iproute2: tests/mpi/test_multihost.sh builds hosts from network namespaces
# man-db and groff-base: tests/mpi/test_docs.sh renders every man page and fails on a warning
PKGS="build-essential autoconf automake libtool pkg-config openmpi-bin libopenmpi-dev liburing-dev libhdf5-openmpi-dev libjansson-dev libopenblas-dev man-db groff-base iproute2"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "zinf: missing Debian packages:$missing" >&2
    echo "zinf: install them with: sudo apt-get install$missing" >&2
    exit 1
fi
echo "zinf: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
