#!/usr/bin/env bash
# tests/examples/tf_semantics_flags.sh — docs/TF_SEMANTICS.md against the
# programs' --help:
#   tf_semantics_flags.sh <TF_SEMANTICS.md> <name>=<program> [<name>=<program>...]
#
# The page's convention: a section (## heading) that names command-line flags
# says which programs take them in a comment `<!-- help-checked: prog ... -->`.
# This script checks
#  1. every flag written `--flag` in such a section is an option of at least
#     one of its programs (a name in the option column of their --help);
#  2. every row `| `--flag` | default | ... |` of a flag table whose default
#     is not "—" states the default that --help prints for it (numbers
#     compared as numbers, true/false as CLI11's 1/0, anything else as text);
#  3. no section names a flag without saying whose it is, and every program
#     a section names was given on the command line.
# Fails listing every mismatch; passes printing how many flags it checked.
set -u
[ $# -ge 2 ] || {
  echo "usage: tf_semantics_flags.sh <TF_SEMANTICS.md> <name>=<program> [<name>=<program>...]"
  exit 2
}
doc=$1
shift
[ -r "$doc" ] || {
  echo "FAIL: cannot read $doc"
  exit 1
}
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT

# Each program's options: one line per name, "<name> <default or ->".
declare -A options
for arg in "$@"; do
  name=${arg%%=*} prog=${arg#*=}
  "$prog" --help >"$work/$name.help" 2>&1
  status=$?
  if [ $status -ne 0 ]; then
    echo "FAIL: $prog --help exited with $status"
    cat "$work/$name.help"
    exit 1
  fi
  # Option lines start with two spaces and a dash; their first field holds
  # the names (comma-separated, a flag's {default} after one), the second
  # TYPE[:{set}][=default] when the option takes a value.
  awk '/^  -/ {
         names = $1; sub(/\{[^}]*\}$/, "", names); def = "-";
         if ($2 ~ /^[A-Z]+(:\{[^}]*\})?=/) { def = $2; sub(/^[^=]*=/, "", def) }
         n = split(names, a, ",");
         for (i = 1; i <= n; i++) if (a[i] ~ /^--/) print a[i], def
       }' "$work/$name.help" >"$work/$name.options"
  [ -s "$work/$name.options" ] || {
    echo "FAIL: no options found in the --help of $prog"
    exit 1
  }
  options[$name]=$work/$name.options
done

# The page's flags: "<line> <section> <programs, comma-separated or -> <flag> <default or ->".
awk 'FNR == 1 { sec = "0" }
     NR == FNR {
       if ($0 ~ /^## /) sec = $2;
       if (match($0, /<!-- help-checked: [^>]*-->/)) {
         p = substr($0, RSTART + 19, RLENGTH - 22); gsub(/^ +| +$/, "", p); gsub(/ +/, ",", p);
         progs[sec] = progs[sec] (progs[sec] == "" ? "" : ",") p
       }
       next
     }
     /^## / { sec = $2 }
     /^```/ { fence = !fence }
     fence { next }
     {
       line = $0; table = 0; def = "-";
       if (line ~ /^\| `--[A-Za-z0-9_-]+` \|/) {
         table = 1; split(line, cells, "|"); def = cells[3]; gsub(/^ +| +$/, "", def);
         if (def == "" || def == "—") def = "-"
       }
       first = 1;
       while (match(line, /`--[A-Za-z0-9_-]+`/)) {
         flag = substr(line, RSTART + 1, RLENGTH - 2);
         print FNR, sec, (sec in progs ? progs[sec] : "-"), flag, (table && first ? def : "-");
         first = 0;
         line = substr(line, RSTART + RLENGTH)
       }
     }' "$doc" "$doc" >"$work/flags"

# true/false as CLI11 prints booleans; numbers as numbers.
same_value() {
  local doc_value=$1 help_value=$2
  case "$doc_value" in true) doc_value=1 ;; false) doc_value=0 ;; esac
  [ "$doc_value" = "$help_value" ] && return 0
  awk -v a="$doc_value" -v b="$help_value" 'BEGIN {
    num = "^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$";
    if (a !~ num || b !~ num) exit 1;
    d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a);
    exit !(d <= 1e-12 * (m > 1 ? m : 1))
  }'
}

errors=0 checked=0 defaults=0
while read -r line sec progs flag def; do
  if [ "$progs" = "-" ]; then
    echo "FAIL: line $line (section $sec) names $flag but the section has no <!-- help-checked: ... --> comment"
    errors=$((errors + 1))
    continue
  fi
  found="" help_default=""
  for p in ${progs//,/ }; do
    if [ -z "${options[$p]:-}" ]; then
      echo "FAIL: line $line (section $sec) names program '$p', which was not given to this test"
      errors=$((errors + 1))
      continue
    fi
    hit=$(awk -v f="$flag" '$1 == f { print $2; exit }' "${options[$p]}")
    if [ -n "$hit" ]; then
      found=$p help_default=$hit
      break
    fi
  done
  checked=$((checked + 1))
  if [ -z "$found" ]; then
    echo "FAIL: line $line (section $sec): $flag is not an option of ${progs//,/ or } (--help)"
    errors=$((errors + 1))
    continue
  fi
  [ "$def" = "-" ] && continue
  defaults=$((defaults + 1))
  if ! same_value "$def" "$help_default"; then
    echo "FAIL: line $line (section $sec): the page gives $flag the default '$def', $found --help says '$help_default'"
    errors=$((errors + 1))
  fi
done <"$work/flags"

[ "$checked" -gt 0 ] || {
  echo "FAIL: no flags found in $doc"
  exit 1
}
if [ "$errors" -gt 0 ]; then
  echo "FAIL: $errors mismatch(es) between $doc and --help"
  exit 1
fi
echo "PASS: $checked flag mentions in $doc are options of their programs; $defaults stated defaults match --help"
