#!/bin/sh
# tests/host/compile_fail.sh EXPECTED COMPILER ARGS... — compile; pass when the compiler refuses and its
# diagnostics contain EXPECTED. EXPECTED "-" means the opposite: the compile must succeed.
expected="$1"
shift
log=$("$@" 2>&1)
rc=$?
if [ "$expected" = "-" ]; then
  if [ $rc -ne 0 ]; then
    printf '%s\n' "$log" | head -40
    echo "FAIL: the control case did not compile"
    exit 1
  fi
  echo "PASS: the control case compiles"
  exit 0
fi
if [ $rc -eq 0 ]; then
  echo "FAIL: compiled, but must be refused with: $expected"
  exit 1
fi
if printf '%s\n' "$log" | grep -F -q -- "$expected"; then
  echo "PASS: refused with: $expected"
  exit 0
fi
printf '%s\n' "$log" | grep -E 'error' | head -20
echo "FAIL: refused, but the diagnostics do not say: $expected"
exit 1
