#!/usr/bin/env bash
# The layering rule of docs/ARCHITECTURE.md: outside include/cifarnet/backend/,
# the layers, containers, models, losses, optimizers and the trainer touch
# no tensor or arena element. Checked
# as three patterns (a proxy: review enforces the rest): no OpenMP pragma, no
# Eigen expression, no `for` header with an indexed assignment on its line
# (for (...) y[i] = ...). Element work is a backend op (ops/ops.hpp).
# Prints every offending line and exits 1; exits 0 when there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
DIRS=(include/cifarnet/layers include/cifarnet/nn include/cifarnet/loss include/cifarnet/models include/cifarnet/optim
  include/cifarnet/train)
PATTERN='#pragma omp|Eigen::|for \(.*\).*[A-Za-z_][A-Za-z0-9_]*\[[^]]+\] *[-+*/]?=[^=]'
if hits=$(grep -rnE "$PATTERN" "${DIRS[@]}" | grep -vE '^[^:]+:[0-9]+: *//'); then
  echo "check_layering: element loops outside include/cifarnet/backend/ (docs/ARCHITECTURE.md):"
  echo "$hits"
  exit 1
fi
echo "check_layering: layers, nn, loss, models, optim and train run every element through backend ops"
