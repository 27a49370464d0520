"""The multi-rank checks under MPI: ``horovodrun --mpi`` and Open MPI's own ``mpirun``
(Horovod built with MPI and Gloo by scripts/install_horovod.sh; skipped where MPI is missing)."""
import json

import pytest

from horovod_run import assert_raised_on_every_rank, excerpt, horovodrun

pytest.importorskip("horovod.torch", exc_type=ImportError)

# Multi-rank jobs under real Horovod: `pytest -m "not horovod"` leaves them out.
pytestmark = pytest.mark.horovod

MPI_CONTROLLERS = ["mpi", "mpirun"]


@pytest.mark.parametrize("controller", MPI_CONTROLLERS)
def test_torch_exact_reduction_under_mpi(controller):
    rc, out = horovodrun(2, "tests/workers/torch_exact.py", "float32:allgather:plain",
                         "float32:allgather:groups,sum@rlh,ans,auto", controller=controller)
    assert rc == 0 and "OK" in out, excerpt(out)


@pytest.mark.parametrize("controller", MPI_CONTROLLERS)
def test_tensorflow_exact_reduction_under_mpi(controller):
    pytest.importorskip("horovod.tensorflow", exc_type=ImportError)
    rc, out = horovodrun(2, "tests/workers/tf_exact.py", "tape", controller=controller)
    assert rc == 0 and "OK" in out, excerpt(out)


@pytest.mark.parametrize("controller", MPI_CONTROLLERS)
def test_corrupt_stream_raises_on_every_rank_under_mpi(controller):
    rc, out = horovodrun(2, "tests/workers/torch_faults.py", "corrupt:auto", timeout=120,
                         controller=controller)
    assert rc == 0, excerpt(out)
    assert_raised_on_every_rank(out, 2, {"corrupt:auto": "DecodeError"})


@pytest.mark.parametrize("controller", MPI_CONTROLLERS)
def test_training_under_mpi_keeps_ranks_identical(controller):
    rc, out = horovodrun(2, "examples/pytorch_digits.py", "--compression", "rlh", "--epochs", 2,
                         timeout=300, controller=controller)
    assert rc == 0, excerpt(out)
    line = next(line for line in out.splitlines() if "RESULT " in line)
    result = json.JSONDecoder().raw_decode(line.split("RESULT ", 1)[1])[0]   # MPI may append
    assert result["ranks"] == 2 and result["identical_parameters"]
    assert result["test_accuracy"] > 0.5
