#!/usr/bin/env bash
# tests/softroce/expect.sh [--skip-if-rdma-devices] CODE PATTERN COMMAND...
# Runs COMMAND; passes when it exits with CODE and its output contains PATTERN (fixed string). With
# --skip-if-rdma-devices, exits 77 (skip) on a machine that has RDMA devices (the "no devices" case cannot happen).
set -u
if [ "${1:-}" = --skip-if-rdma-devices ]; then
  shift
  if [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then echo "RDMA devices present: cannot test the no-device path"; exit 77; fi
fi
want=$1 pattern=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" != "$want" ]; then echo "FAIL: exit status $rc, expected $want"; exit 1; fi
if ! grep -qF -- "$pattern" <<<"$out"; then echo "FAIL: output lacks: $pattern"; exit 1; fi
echo "PASS: exit $rc and the message names the cause"
