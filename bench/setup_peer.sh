#!/usr/bin/env bash
# Makes the virtual environment of the PyTorch 2.x peer that
# bench/run_vs_peer.sh runs beside cifarnet: PyTorch and NumPy from PyPI in
# .venv-peer/ (ignored by git). A developer tool, not a dependency of the
# library, its build or its tests; idempotent.
#   bash bench/setup_peer.sh [venv-dir]    (then PEER_PY=<venv-dir>/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-peer}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
dpkg -s python3-venv > /dev/null 2>&1 || { $SUDO apt-get update -q && $SUDO apt-get install -y -q python3-venv; }
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet torch numpy
"$VENV/bin/python" -c 'import sys, torch; print("peer venv ready:", sys.argv[1], "torch", torch.__version__)' "$VENV"
