#!/usr/bin/env bash
# Create .venv and install this package with its test and benchmark dependencies.
# Idempotent: a second run only checks what is there. Set WITH_HOROVOD=1 to also build/install
# Horovod (scripts/install_horovod.sh; the wheel is cached after the first build).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
# torch is pinned (setup.py): an unpinned torch pulls several GB of CUDA packages.
.venv/bin/python -m pip install -q -e ".[dev]" 2>&1 | grep -v "is ignored" || true
.venv/bin/python -c "import horovod_huffman, numba, torch; print('horovod-huffman', horovod_huffman.__version__, '| numba', numba.__version__, '| torch', torch.__version__)"
# Compile every kernel into Numba's cache now, so the first training step does not.
.venv/bin/python -m horovod_huffman.compile
if [ "${WITH_HOROVOD:-0}" = "1" ]; then
    bash scripts/install_system.sh
    PYTHON=.venv/bin/python bash scripts/install_horovod.sh
fi
