#!/usr/bin/env bash
# tests/examples/expect.sh — runs an example program and checks how it ended:
#   expect.sh [--fresh <dir>] <exit status> <extended regex> <program> [args...]
# --fresh removes <dir> first (a job directory left by an earlier ctest run
# would make a training program resume instead of train).
# Passes when the program exits with exactly that status and its output
# (stdout and stderr together, newlines read as spaces so a pattern may span
# lines) matches the regex (grep -E); otherwise says which of the two failed. The output is echoed so ctest -V shows it.
set -u
if [ "${1:-}" = "--fresh" ] && [ $# -ge 2 ]; then
  rm -rf -- "$2"
  shift 2
fi
if [ $# -lt 3 ]; then
  echo "usage: expect.sh [--fresh <dir>] <exit status> <extended regex> <program> [args...]" >&2
  exit 2
fi
want_status=$1
pattern=$2
shift 2
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
ok=1
if [ "$status" -ne "$want_status" ]; then
  echo "FAIL: exit status $status, expected $want_status"
  ok=0
fi
if ! printf '%s\n' "$out" | tr '\n' ' ' | grep -Eq -- "$pattern"; then
  echo "FAIL: the output does not match /$pattern/"
  ok=0
fi
[ $ok -eq 1 ] && echo "PASS: exit status $status and output matching /$pattern/"
[ $ok -eq 1 ]
