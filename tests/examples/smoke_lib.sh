# tests/examples/smoke_lib.sh — helpers of the smoke-run scripts (sourced).
# run <log> <program> [args...]: runs the program, keeps its output in <log>
# and echoes it; returns the program's exit status.
run() {
  local log=$1
  shift
  echo "+ $*"
  "$@" >"$log" 2>&1
  local status=$?
  cat "$log"
  return $status
}
fail() {
  echo "FAIL: $*"
  exit 1
}
# need <log> <extended regex> <what>: the log must have a line matching.
need() {
  grep -Eq -- "$2" "$1" || fail "$3 (no line of $1 matches /$2/)"
}
# number_at <log> <regex with one group>: the number the group captures on
# the first matching line.
number_at() {
  sed -nE "s/$2/\\1/p" "$1" | head -n 1
}
# mean_at <log> <regex> [group = 1]: the mean of the numbers that group
# captures on every matching line (empty when none matches).
mean_at() {
  sed -nE "s/$2/\\${3:-1}/p" "$1" | awk '{ s += $1; n++ } END { if (n) printf "%.4f\n", s / n }'
}
# less <a> <b> <margin>: true when a < b - margin.
less() {
  awk -v a="$1" -v b="$2" -v m="$3" 'BEGIN { exit !(a != "" && b != "" && a + 0 < b - m) }'
}
