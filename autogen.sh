#!/bin/sh
# Regenerate the build system from configure.ac and Makefile.am.
set -e
mkdir -p m4
autoreconf -fi "$@"
