#!/usr/bin/env bash
# A CMAKE_CXX_COMPILER_LAUNCHER that runs the compile command under
# /usr/bin/time (Debian package `time`) and appends "<user+sys seconds>
# <output file>" to $CPU_TIME_LOG: the compiler CPU time of each object,
# which a loaded machine changes far less than wall time.
set -euo pipefail
: "${CPU_TIME_LOG:?cpu_time_launcher.sh: set CPU_TIME_LOG to the log file}"
out="?"
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  if [ "${args[i]}" = "-o" ] && [ $((i + 1)) -lt ${#args[@]} ]; then out=${args[i + 1]}; fi
done
t=$(mktemp)
trap 'rm -f "$t"' EXIT
rc=0
/usr/bin/time -f "%U %S" -o "$t" "$@" || rc=$?
read -r u s < "$t" || true
awk -v u="${u:-0}" -v s="${s:-0}" -v o="$out" 'BEGIN { printf "%.2f %s\n", u + s, o }' >> "$CPU_TIME_LOG"
exit $rc
