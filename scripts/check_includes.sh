#!/usr/bin/env bash
# The include graph of include/cifarnet/ against the layers that
# docs/ARCHITECTURE.md draws. The drawing is read from that file, from its
# line
#   layering: core -> ops/backend -> layers/nn -> ...
# (folders of include/cifarnet/, lowest first; folders joined by '/' are one
# layer and may include each other), plus any lines
#   layering-exception: <header> -> <folder>/  <why>
# A header in folder F may include "cifarnet/G/..." only when G's layer is
# F's or lower. A header directly in include/cifarnet/ (cifarnet.hpp,
# layers.hpp) belongs to the layer of the same-named folder, or, having none,
# sits above every layer (an umbrella). A folder that is not in the drawing is
# an error too: a new folder gets its place there first.
# Prints every offending include (file:line) and exits 1; exits 0 when there
# is none.
# Usage: check_includes.sh [include-root=include] [doc=docs/ARCHITECTURE.md]
#        check_includes.sh --self-test   (the checker must reject the
#        violations in tests/fixtures/layering and pass its clean tree)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --self-test ]; then
  fx=tests/fixtures/layering
  if ! out=$(bash "$0" "$fx/clean" "$fx/ARCHITECTURE.md" 2>&1); then
    echo "check_includes self-test: the clean fixture tree was rejected:"
    echo "$out"
    exit 1
  fi
  if out=$(bash "$0" "$fx/bad" "$fx/ARCHITECTURE.md" 2>&1); then
    echo "check_includes self-test: the fixture tree with violations passed:"
    echo "$out"
    exit 1
  fi
  status=0
  for want in 'cifarnet/core/uses_train.hpp:4: includes "cifarnet/train/loop.hpp"' \
    'cifarnet/io/uses_data.hpp:3: includes "cifarnet/data/set.hpp"' \
    'cifarnet/extra/thing.hpp: folder extra is not in the drawing' \
    'cifarnet/backend/not_excepted.hpp:3: includes "cifarnet/optim/step.hpp"'; do
    if ! grep -qF "$want" <<<"$out"; then
      echo "check_includes self-test: expected the report to contain: $want"
      status=1
    fi
  done
  if grep -qF 'backend/excepted.hpp' <<<"$out"; then
    echo "check_includes self-test: the exception for backend/excepted.hpp was not honoured"
    status=1
  fi
  if [ $status -ne 0 ]; then
    echo "the checker's report was:"
    echo "$out"
    exit 1
  fi
  echo "check_includes self-test: 4 violations reported, clean tree and exception accepted"
  exit 0
fi

ROOT=${1:-include}
DOC=${2:-docs/ARCHITECTURE.md}
drawing=$(grep -m1 '^layering: ' "$DOC" | sed 's/^layering: //') || {
  echo "check_includes: no 'layering:' line in $DOC"
  exit 1
}
declare -A rank=()
r=0
IFS=' ' read -r -a steps <<<"$(sed 's/->/ /g' <<<"$drawing")"
for step in "${steps[@]}"; do
  IFS=/ read -r -a folders <<<"$step"
  for f in "${folders[@]}"; do rank[$f]=$r; done
  r=$((r + 1))
done
top=$r
declare -A allowed=()
while read -r file _ target _; do
  [ -n "$file" ] && allowed["$file>${target%/}"]=1
done < <(grep '^layering-exception: ' "$DOC" | sed 's/^layering-exception: //')

layer_of() {  # layer_of <path below cifarnet/> -> rank, or empty when unknown
  local rel=$1 folder
  if [[ $rel == */* ]]; then
    folder=${rel%%/*}
    echo "${rank[$folder]:-}"
  else
    folder=${rel%.hpp}
    echo "${rank[$folder]:-$top}"
  fi
}

bad=0
report=""
while IFS= read -r -d '' path; do
  rel=${path#"$ROOT"/cifarnet/}
  from=$(layer_of "$rel")
  if [ -z "$from" ]; then
    report+="cifarnet/$rel: folder ${rel%%/*} is not in the drawing ($DOC, 'layering:')"$'\n'
    bad=1
    continue
  fi
  while IFS=: read -r line target; do
    to=$(layer_of "$target")
    tfolder=${target%%/*}
    if [ -z "$to" ]; then
      report+="cifarnet/$rel:$line: includes \"cifarnet/$target\", whose folder $tfolder is not in the drawing"$'\n'
      bad=1
    elif [ "$to" -gt "$from" ] && [ -z "${allowed["$rel>$tfolder"]:-}" ]; then
      report+="cifarnet/$rel:$line: includes \"cifarnet/$target\": $tfolder is above ${rel%%/*} in the drawing"$'\n'
      bad=1
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]cifarnet/' "$path" |
    sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]cifarnet\/([^">]+)[">].*/\1:\2/')
done < <(find "$ROOT/cifarnet" -name '*.hpp' -print0 | sort -z)

if [ $bad -ne 0 ]; then
  echo "check_includes: includes against the layering of $DOC ($drawing):"
  printf '%s' "$report"
  exit 1
fi
echo "check_includes: every #include \"cifarnet/...\" in $ROOT/cifarnet follows $drawing"
