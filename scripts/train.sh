#!/usr/bin/env bash
# The main job on a fresh machine: set up (including Horovod), then train the digits CNN on
# 2 ranks with RLH-coded QSGD gradients. Extra arguments go to the example, e.g. --epochs 4.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_HOROVOD=1 bash scripts/setup.sh
exec .venv/bin/horovodrun --gloo -np "${NP:-2}" .venv/bin/python examples/pytorch_digits.py \
    --compression "${COMPRESSION:-rlh}" "$@"
