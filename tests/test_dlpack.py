"""DLPack import/export (horovod_huffman.codec.dlpack), checked on host tensors of real frameworks:
the same structs and ownership rules carry CUDA tensors on a GPU."""
import gc

import numpy as np
import pytest

from horovod_huffman.codec import dlpack


def test_torch_tensor_is_viewed_without_a_copy():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    view = dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t))
    assert view.shape == (3, 4) and view.dtype == np.float32
    t[1, 2] = 42.0
    assert view[1, 2] == 42.0
    np.testing.assert_array_equal(view, t.numpy())


def test_exported_array_reaches_torch_and_is_released():
    torch = pytest.importorskip("torch")
    x = np.arange(10, dtype=np.int16)
    t = torch.utils.dlpack.from_dlpack(dlpack.to_dlpack(x))
    x[3] = -7
    assert t.dtype == torch.int16 and int(t[3]) == -7
    assert dlpack._EXPORTED
    del t
    gc.collect()
    assert not dlpack._EXPORTED


def test_unconsumed_capsule_releases_its_array():
    capsule = dlpack.to_dlpack(np.ones(5))
    assert dlpack._EXPORTED
    del capsule
    gc.collect()
    assert not dlpack._EXPORTED


def test_tensorflow_round_trip():
    tf = pytest.importorskip("tensorflow")
    t = tf.constant([[1.5, 2.5], [3.5, 4.5]])
    np.testing.assert_array_equal(dlpack.from_dlpack(tf.experimental.dlpack.to_dlpack(t)),
                                  t.numpy())
    y = np.arange(6, dtype=np.float64).reshape(2, 3)
    np.testing.assert_array_equal(tf.experimental.dlpack.from_dlpack(dlpack.to_dlpack(y)).numpy(), y)


def test_bad_capsules_are_refused():
    torch = pytest.importorskip("torch")
    capsule = torch.utils.dlpack.to_dlpack(torch.zeros(3))
    dlpack.from_dlpack(capsule)
    with pytest.raises(ValueError, match="DLPack"):
        dlpack.from_dlpack(capsule)                          # consumed already
    with pytest.raises(TypeError, match="dtype"):
        dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(torch.zeros(3, dtype=torch.bfloat16)))
    with pytest.raises(ValueError):
        dlpack.from_dlpack(object())
