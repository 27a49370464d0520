#!/usr/bin/env bash
# Every check that needs a GPU, in one call of a machine with a CUDA GPU and no package index
# (docs/gpu.md, "Checks on a GPU machine"): run from the repository root, as root, with the
# Python that holds a CUDA torch, numba-cuda, pytest-xdist and torchvision.
#
#   bash benchmarks/gpu_checks.sh carry            # first, where pip reaches an index: fills .gpu
#   bash benchmarks/gpu_checks.sh [PHASE ...]      # there; default: every phase below, in order
#
# Every phase takes longer than a 15-minute lease holds with the machine's start; two calls
# split them: `install tests train`, then `install bench profile`.
#
# Phases, each with its own time limit, the later ones skipped when the call's budget
# (GPU_CHECKS_SECONDS, default 560) would run out:
#   env      the GPU, driver, compilers and Python packages there
#   install  this package (pip --no-index, editable); Horovod's build starts in the background
#   tests    tests/test_gpu.py on the GPU (8 workers)
#   bench    python -m horovod_huffman.tools.bench --device cuda: rlh, ans and rla at 1M, 16M and 256M
#            coordinates, the device-to-device copy beside them
#   train    waits for Horovod, then: Horovod's own ResNet-50 synthetic benchmark on 2 ranks
#            sharing the GPU (benchmarks/synthetic_gpu.py) for none, fp16 and rlh, and the
#            CUDA-gradient exact-reduction tests of Horovod's optimizer and DDP's hook
#            (tests/test_torch_horovod.py and tests/test_ddp.py, -k cuda)
#   profile  benchmarks/gpu_profile.py: a step of 8 buckets of 1M coordinates exchanged at once
#            on 2 in-process ranks, for rlh, ans and rla: milliseconds per step and bucket, and
#            the launches, copies, allocations and synchronizations a step makes, with the
#            host functions that take the time; then rlh and ans on a ResNet-50-sized step
#            of 25 buckets; then the first step again in a new process (kernels from the
#            cache)
#
# Horovod 0.28.1 is built from its sdist, carried at .gpu/horovod-0.28.1.tar.gz (HOROVOD_SDIST),
# against the machine's torch, with Gloo and without GPU operations: Horovod then stages the
# CUDA tensors it reduces itself through host memory (2 ranks cannot share a GPU under NCCL
# before NCCL 2.30). The wheel is kept in .gpu/wheels and copied to $OUT when it is small
# enough to come back (GPU_CHECKS_WHEEL=1), so that a later call carries it and skips the build.
#
# The machine's own numpy, numba and numba-cuda are used where numba.cuda compiles and launches
# a kernel with them; else the wheels carried in .gpu/py (numpy 2.0.2 and numba-cuda 0.30.4 for
# CPython 3.12: numba-cuda 0.30.4 compiles no kernel under numpy 2.5) are installed to
# /tmp/hh-site and put first on PYTHONPATH.
#
# Writes under OUT (default ./gpu_out): summary.txt (phase, exit status, seconds), env.log,
# install.log, build.log (Horovod), tests.log, bench.md, runs.log (bench, synthetic, cuda-exact),
# profile.md: eight files. With GPU_CHECKS_WHEEL=1, also Horovod's wheel where it is under 16 MB.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu_out}
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECKS_SECONDS:-560}
export HOROVOD_SDIST=${HOROVOD_SDIST:-$PWD/.gpu/horovod-0.28.1.tar.gz}
WHEELS=$PWD/.gpu/wheels
mkdir -p "$OUT" "$WHEELS"
START=$(date +%s)
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
# A kernel cache of this call's own: numba's cache=True checks the file that defines a kernel,
# not the device functions it imports from other files, so a cache left by an earlier call of
# an older checkout could hold stale kernels. Every phase of the call shares it.
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-$(mktemp -d /tmp/hh-numba-cache.XXXXXX)}

left() { echo $((BUDGET - ($(date +%s) - START))); }

# phase NAME SECONDS LOG COMMAND...: runs COMMAND (a command or an exported function) under
# `timeout`, its output appended to LOG; skipped when less than SECONDS are left of the budget.
phase() {
    local name=$1 limit=$2 log=$3 t0 rc
    shift 3
    if [ "$(left)" -lt "$limit" ]; then
        echo "$name skipped: $(left) s left of the budget, $limit s needed" | tee -a "$OUT/summary.txt"
        return 0
    fi
    t0=$(date +%s)
    echo "== $name: $*" >>"$log"
    timeout "$limit" bash -c '"$@"' _ "$@" >>"$log" 2>&1
    rc=$?
    echo "$name rc=$rc $(($(date +%s) - t0)) s" | tee -a "$OUT/summary.txt"
    return 0
}

env_report() {
    nvidia-smi || true
    ls -l /dev/nvidia* || true
    nproc
    "$PY" - <<'PY'
import importlib, platform, sys
print("python", sys.version.split()[0], platform.machine())
for name in ("numpy", "numba", "numba_cuda", "torch", "torchvision", "xxhash", "hypothesis",
             "xdist", "sklearn", "tqdm", "cloudpickle", "psutil", "yaml", "setuptools", "wheel"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as e:                                   # noqa: BLE001
        print(name, "MISSING", type(e).__name__, e)
import torch
print("cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
try:
    print("nccl", torch.cuda.nccl.version())
except Exception as e:                                       # noqa: BLE001
    print("nccl", e)
try:
    from numba import cuda
    print("numba sees", cuda.gpus)
except Exception as e:                                       # noqa: BLE001
    print("numba sees no GPU:", type(e).__name__, str(e).splitlines()[0])
PY
    for tool in nvcc gcc g++ cmake mpicxx sshd ip tc; do
        printf '%s: ' "$tool"
        command -v "$tool" || echo missing
    done
    nvcc --version | tail -2 || true
    gcc --version | head -1 || true
    ip netns add hh-probe && ip netns del hh-probe && echo "network namespaces: yes" \
        || echo "network namespaces: no"
}

# What the GPU machine cannot download, into .gpu (ignored by git; the device tool's `carry`).
carry() {
    local pip="${PY} -m pip download -q --no-deps"
    $pip --no-binary :all: "horovod==0.28.1" -d .gpu
    local cp312="--only-binary=:all: --python-version 3.12 --implementation cp
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64"
    $pip $cp312 -d .gpu/py numpy==2.0.2 numba-cuda==0.30.4
    $pip $cp312 -d .gpu/build cffi==2.1.1 pycparser==3.12
    # Horovod's synthetic benchmark is not in its sdist: from its git tag, where a network is.
    curl -fsSL -o .gpu/pytorch_synthetic_benchmark.py \
        https://raw.githubusercontent.com/horovod/horovod/v0.28.1/examples/pytorch/pytorch_synthetic_benchmark.py
    ls -l .gpu .gpu/py .gpu/build
}

build_horovod() {
    local nvcc cuda_home
    nvcc=$(command -v nvcc || true)
    cuda_home=${CUDA_HOME:-$([ -n "$nvcc" ] && dirname "$(dirname "$nvcc")")}
    # gcc 13 no longer includes these through other headers; Horovod 0.28.1's sources assume it.
    CXXFLAGS="${CXXFLAGS:-} -include cstdint -include stdexcept -include string" \
    CUDA_HOME=$cuda_home HOROVOD_CUDA_HOME=$cuda_home HOROVOD_BUILD_CUDA_CC_LIST=90 \
    HOROVOD_WHEEL_CACHE=$WHEELS PYTHON=$PY bash scripts/install_horovod.sh
    local wheel
    wheel=$(find "$WHEELS" -name 'horovod-*.whl' | head -1)
    if [ -n "${GPU_CHECKS_WHEEL:-}" ] && [ -n "$wheel" ] && [ "$(stat -c %s "$wheel")" -lt 16000000 ]; then
        cp "$wheel" "$OUT/"
    fi
}

install_package() {
    # Without --use-pep517, a pip older than 25.3 installs this setup.py-only project with
    # `setup.py develop`, which calls pip again with build isolation, that is, an index.
    local pep517=
    "$PY" -m pip install --help | grep -q -- --use-pep517 && pep517=--use-pep517
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation $pep517 -e . || return 1
    "$PY" -c "import horovod_huffman, horovod_huffman.kernels; print('horovod_huffman', horovod_huffman.__version__)"
}

synthetic() {
    local script=$PWD/.gpu/pytorch_synthetic_benchmark.py compression
    for compression in none fp16 rlh; do
        OMP_NUM_THREADS=1 horovodrun --gloo -np 2 -H localhost:2 \
            "$PY" benchmarks/synthetic_gpu.py --script "$script" --compression "$compression" \
            -- --model resnet50 --batch-size 32 --num-warmup-batches 3 --num-iters 3 \
            --num-batches-per-iter 3
    done
}

horovod_report() {
    "$PY" -c "import horovod, horovod.torch as hvd; print('horovod', horovod.__version__, 'gloo', hvd.gloo_built(), 'nccl', hvd.nccl_built(), 'mpi', hvd.mpi_built())"
}

# The Python stack (see the top); decided here, before any phase, so that every phase has it.
# Horovod's setup.py asks for cffi, which the machine may lack: the carried wheels in
# .gpu/build go to /tmp/hh-build, on PYTHONPATH.
python_stack() {
    if ls .gpu/build/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/hh-build .gpu/build/*.whl
        export PYTHONPATH=/tmp/hh-build${PYTHONPATH:+:$PYTHONPATH}
    fi
    # A kernel is compiled and launched: numba-cuda 0.30.4 moves arrays under numpy 2.5 but
    # fails to compile any kernel there (np.row_stack is gone).
    local probe="import numpy, numba; from numba import cuda
def one(a):
    a[0] = 1.0
k = cuda.jit(one)
a = cuda.to_device(numpy.zeros(1)); k[1, 1](a); assert a.copy_to_host()[0] == 1.0
print('numpy', numpy.__version__, 'numba', numba.__version__)"
    if "$PY" -c "$probe"; then
        echo "the machine's own numpy, numba and numba-cuda"
    elif ls .gpu/py/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/hh-site .gpu/py/*.whl
        export PYTHONPATH=/tmp/hh-site${PYTHONPATH:+:$PYTHONPATH}
        "$PY" -c "$probe" && echo "the carried wheels: $(ls .gpu/py)"
    fi
}
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(env install tests bench train profile)
if [ "${phases[0]}" != carry ]; then
    python_stack >>"$OUT/install.log" 2>&1
fi

export PY OUT WHEELS START
export -f env_report build_horovod install_package synthetic horovod_report

BUILD_PID=
# Horovod's background build (under its own time limit), once.
wait_for_build() {
    if [ -n "$BUILD_PID" ]; then
        wait "$BUILD_PID"
        BUILD_PID=
    fi
}
for p in "${phases[@]}"; do
    case $p in
        carry) carry; exit ;;
        env) phase env 60 "$OUT/env.log" env_report ;;
        install)
            phase install 120 "$OUT/install.log" install_package
            # Horovod only where `train` follows (its build would load the CPUs under `bench`).
            if [[ " ${phases[*]} " == *" train "* ]]; then
                (timeout 420 bash -c build_horovod >"$OUT/build.log" 2>&1
                 echo "horovod build rc=$? at $(($(date +%s) - START)) s" | tee -a "$OUT/summary.txt") &
                BUILD_PID=$!
            fi ;;
        # NUMBA_ENABLE_CUDASIM=0: the real GPU, even where /dev/nvidiactl is missing (where
        # tests/conftest.py would pick the simulator).
        tests) phase tests 240 "$OUT/tests.log" env NUMBA_ENABLE_CUDASIM=0 "$PY" -m pytest -q -rs \
                   -n 8 -p no:cacheprovider tests/test_gpu.py ;;
        bench) phase bench 150 "$OUT/runs.log" "$PY" -m horovod_huffman.tools.bench --device cuda \
                   --sizes 1048576 16777216 268435456 --encoders rlh ans rla --repeats 3 \
                   --cpu-max 1048576 --markdown "$OUT/bench.md" ;;
        train)
            wait_for_build
            phase horovod 30 "$OUT/build.log" horovod_report
            phase synthetic 120 "$OUT/runs.log" synthetic
            phase cuda-exact 200 "$OUT/runs.log" env NUMBA_ENABLE_CUDASIM=0 "$PY" -m pytest -q \
                -rs -p no:cacheprovider -n 2 tests/test_torch_horovod.py tests/test_ddp.py -k cuda ;;
        profile) phase profile 120 "$OUT/profile.md" env NUMBA_ENABLE_CUDASIM=0 "$PY" \
                     benchmarks/gpu_profile.py --coords 1048576 --buckets 8 --steps 3
                 phase profile-step 120 "$OUT/profile.md" env NUMBA_ENABLE_CUDASIM=0 "$PY" \
                     benchmarks/gpu_profile.py --coords 1048576 --buckets 25 --steps 3 \
                     --encoders rlh ans rla --top 15
                 # the first profile's step again in a new process: its kernels from the cache
                 phase profile-cached 75 "$OUT/profile.md" env NUMBA_ENABLE_CUDASIM=0 "$PY" \
                     benchmarks/gpu_profile.py --coords 1048576 --buckets 8 --steps 1 \
                     --encoders rlh ans rla --top 0 ;;
        *) echo "unknown phase $p" >&2; exit 2 ;;
    esac
done
wait_for_build
echo "done in $(($(date +%s) - START)) s" | tee -a "$OUT/summary.txt"
