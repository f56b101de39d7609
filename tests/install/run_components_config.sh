#!/usr/bin/env bash
# The installed package config's optional components (configure only): a
# consumer that asks for none is found with every optional dependency hidden
# (CMAKE_DISABLE_FIND_PACKAGE_<dep>); asked for as OPTIONAL_COMPONENTS with
# their dependencies hidden they are left out, saying why; asked for as
# COMPONENTS they make find_package fail, naming each component and what it
# lacks; with their dependencies there, their targets are loaded.
# Usage: run_components_config.sh <cifarnet-source> <install-prefix> <work-dir>
set -euo pipefail
src=$1 prefix=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() {
  echo "FAIL: $*"
  exit 1
}
cmakedir=$(dirname "$(find "$prefix" -name cifarnetConfig.cmake | head -1)")
[ -f "$cmakedir/cifarnetConfig.cmake" ] || fail "no cifarnetConfig.cmake under $prefix"
# The optional components this install has, and the package each needs.
declare -A dep=([matio]=Matio [download]=CURL [mpi]=MPI [cuda]=CUDAToolkit)
installed=()
for c in matio download mpi cuda; do
  if [ -f "$cmakedir/cifarnet-$c-targets.cmake" ]; then installed+=("$c"); fi
done
if grep -q "MPI::\|CURL::\|LibArchive::\|OpenSSL::\|Matio::\|CUDA::\|CUDNN::" "$cmakedir/cifarnetTargets.cmake"; then
  fail "the core's cifarnetTargets.cmake names an optional dependency"
fi
hide_all=()
for d in Matio CURL LibArchive OpenSSL MPI CUDAToolkit CUDNN NCCL; do
  hide_all+=("-DCMAKE_DISABLE_FIND_PACKAGE_$d=TRUE")
done
consumer() {  # <name> <cmake args...>: configure output in $work/<name>.log, status returned
  local name=$1
  shift
  cmake -S "$src/tests/install/consumer_components" -B "$work/$name" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" "$@" \
    > "$work/$name.log" 2>&1
}
list=$(IFS=';' && echo "${installed[*]}")

# 1. No component asked for, every optional dependency hidden: found, no component target.
consumer none "${hide_all[@]}" || fail "core without optional dependencies: $(tail -20 "$work/none.log")"
for c in matio download mpi cuda; do
  grep -q "component $c: found FALSE, target no" "$work/none.log" || fail "$c loaded though not asked for"
done
if [ ${#installed[@]} -eq 0 ]; then
  echo "core without optional dependencies: ok"
  echo "SKIPPED: the install has no optional component (none of matio, download, mpi, cuda was found when cifarnet was built)"
  exit 0
fi

# 2. All asked for as OPTIONAL_COMPONENTS, their dependencies hidden: found, each left out saying why.
consumer optional "${hide_all[@]}" "-DOPTIONAL=$list" || fail "optional components: $(tail -20 "$work/optional.log")"
for c in "${installed[@]}"; do
  grep -q "component $c: found FALSE, target no" "$work/optional.log" || fail "optional $c found without ${dep[$c]}"
  grep -q "optional component $c left out: cifarnet::$c needs" "$work/optional.log" || fail "optional $c: no reason given"
done

# 3. Each asked for as COMPONENTS with its dependency hidden, plus an unknown one: fails, naming each.
if consumer required "${hide_all[@]}" "-DREQUIRE=$list;bogus"; then
  fail "required components found without their dependencies"
fi
grep -q "a requested component is not available" "$work/required.log" || fail "no message: $(tail -20 "$work/required.log")"
for c in "${installed[@]}"; do
  grep -q "cifarnet::$c needs" "$work/required.log" || fail "the failure does not name cifarnet::$c"
done
grep -q "cifarnet::bogus no such component" "$work/required.log" || fail "the unknown component is not named"

# 4. Asked for with their dependencies present: loaded.
consumer present "-DREQUIRE=$list" || fail "components with their dependencies: $(tail -20 "$work/present.log")"
for c in "${installed[@]}"; do
  grep -q "component $c: found TRUE, target yes" "$work/present.log" || fail "$c not loaded though asked for"
done
echo "installed config: core without optional dependencies; components ${installed[*]} loaded only when asked for: ok"
