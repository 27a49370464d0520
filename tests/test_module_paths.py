"""The short module paths (horovod_huffman.<name>) are the layer subpackages' modules."""
import importlib
import subprocess
import sys

import pytest

import horovod_huffman
from horovod_huffman.module_paths import SHORT


@pytest.mark.parametrize("short", sorted(SHORT))
def test_a_short_path_is_the_full_paths_module(short):
    module = importlib.import_module(f"horovod_huffman.{short}")
    assert module is importlib.import_module(f"horovod_huffman.{SHORT[short]}")
    assert module.__spec__.name == f"horovod_huffman.{SHORT[short]}"


def test_submodules_and_names_through_short_paths_are_one_module():
    from horovod_huffman.encoders.rows import slice_layout
    from horovod_huffman.codec.encoders import rows
    from horovod_huffman.quantizers import QSGD
    from horovod_huffman.exchange import Codec, MismatchError
    from horovod_huffman.exchange.frames import MismatchError as frames_mismatch
    assert slice_layout is rows.slice_layout
    assert QSGD is horovod_huffman.QSGD
    assert MismatchError is frames_mismatch and Codec.__module__.endswith("codec_state")


def test_a_fresh_interpreter_imports_a_short_path_first():
    code = ("import horovod_huffman.encoders.rows as short, horovod_huffman.codec.encoders.rows "
            "as full; assert short is full; import horovod_huffman.wire")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_an_unknown_short_path_is_not_found():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("horovod_huffman.no_such_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("horovod_huffman.encoders.no_such_module")
