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

# pip, its output without the "is ignored" notices of an editable install; fails when pip fails.
pip_install() {
    local log rc=0
    log=$(mktemp)
    .venv/bin/python -m pip install -q "$@" >"$log" 2>&1 || rc=$?
    grep -v "is ignored" "$log" || true
    rm -f "$log"
    if [ "$rc" -ne 0 ]; then
        echo "set-up failed: pip install $* exited with $rc" >&2
        return "$rc"
    fi
}
pip_install --upgrade pip
# torch is pinned (setup.py): an unpinned torch pulls several GB of CUDA packages.
pip_install -e ".[dev]"
# Every pinned framework imports, at its pinned version (docker/versions.env): a framework that
# is missing would make Horovod build without it and its tests skip.
TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python - <<'PY'
import horovod_huffman, numba, tensorflow, tf_keras, torch
pins = dict(line.strip().split("=", 1) for line in open("docker/versions.env")
            if "=" in line and not line.startswith("#"))
for name, module in (("TORCH_VERSION", torch), ("TENSORFLOW_VERSION", tensorflow),
                     ("TF_KERAS_VERSION", tf_keras)):
    want = pins.get(name)
    if want and not module.__version__.startswith(want):
        raise SystemExit(f"set-up failed: {module.__name__} {module.__version__} installed, "
                         f"{want} pinned (docker/versions.env {name})")
print("horovod-huffman", horovod_huffman.__version__, "| numba", numba.__version__,
      "| torch", torch.__version__, "| tensorflow", tensorflow.__version__)
PY
# Compile every kernel into Numba's cache now, so the first training step does not: on one
# core (Numba compiles on one), beside the system packages and Horovod's build.
compile_log=$(mktemp)
.venv/bin/python -m horovod_huffman.tools.compile >"$compile_log" 2>&1 &
compile_pid=$!
if [ "${WITH_HOROVOD:-0}" = "1" ]; then
    bash scripts/install_system.sh
    PYTHON=.venv/bin/python bash scripts/install_horovod.sh
fi
compile_rc=0
wait "$compile_pid" || compile_rc=$?
cat "$compile_log"
rm -f "$compile_log"
if [ "$compile_rc" -ne 0 ]; then
    echo "set-up failed: python -m horovod_huffman.tools.compile exited with $compile_rc" >&2
    exit "$compile_rc"
fi
