"""Invalid encoder arguments raise TypeError/ValueError naming the problem."""
import numpy as np
import pytest

import horovod_huffman as hh


@pytest.mark.parametrize("name", hh.ENCODERS)
def test_non_integer_levels_raise_type_error(name):
    enc = hh.get_encoder(name)
    with pytest.raises(TypeError, match="integer"):
        enc.encode(np.zeros(4, dtype=np.float32))
    with pytest.raises(TypeError, match="integer"):
        enc.encode(np.zeros(4, dtype=np.uint8))
    with pytest.raises(TypeError, match="NumPy"):
        enc.encode([1, 2, 3])


@pytest.mark.parametrize("name", hh.ENCODERS)
def test_out_of_range_levels_raise_value_error(name):
    enc = hh.get_encoder(name)
    with pytest.raises(ValueError, match="int32 range"):
        enc.encode(np.array([0, 2**40], dtype=np.int64))
    with pytest.raises(ValueError, match="1-D"):
        enc.encode(np.zeros((2, 2), dtype=np.int8))


def test_unknown_names_and_bad_parameters():
    with pytest.raises(ValueError, match="unknown encoder 'lzw'"):
        hh.get_encoder("lzw")
    with pytest.raises(TypeError):
        hh.get_encoder(3)
    with pytest.raises(ValueError, match="k must"):
        hh.get_encoder("shs", k=0)
    with pytest.raises(ValueError, match="sample_size"):
        hh.get_encoder("sh", sample_size=0)
    with pytest.raises(TypeError):
        hh.get_encoder("rlh", k=3)
    with pytest.raises(ValueError, match="levels"):
        hh.QSGD(levels=0)
    with pytest.raises(TypeError, match="float"):
        hh.QSGD().quantize(np.zeros(3, dtype=np.int32))


def test_encoders_list_every_name():
    assert set(hh.ENCODERS) == {"huffman", "rlh", "sh", "shs", "elias_gamma", "elias_delta",
                                "elias_omega", "elias_rle", "qsgd_elias", "raw", "ans", "rla",
                                "auto"}
