"""The examples in docstrings run as written (doctest), in every module of the package that has
them; a module that needs Horovod or a framework is skipped where that is not installed."""
import doctest
import importlib
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "horovod_huffman")
# Importing it is the legacy-Keras set-up itself: it raises unless TF_USE_LEGACY_KERAS=1 was set
# before TensorFlow was imported (tests/workers/tf_fit.py runs it that way; its examples are
# marked +SKIP).
IMPORTED_ELSEWHERE = {"horovod_huffman.tensorflow.legacy_keras"}


def modules_with_examples():
    names = []
    for folder, _, files in os.walk(PACKAGE):
        for file in sorted(files):
            if not file.endswith(".py"):
                continue
            with open(os.path.join(folder, file)) as f:
                if ">>>" not in f.read():
                    continue
            parts = os.path.relpath(os.path.join(folder, file), os.path.dirname(PACKAGE))
            name = parts[:-3].replace(os.sep, ".").removesuffix(".__init__")
            if name not in IMPORTED_ELSEWHERE:
                names.append(name)
    return sorted(names)


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples_run_as_written(name):
    if name.startswith(("horovod_huffman.torch", "horovod_huffman.tensorflow")):
        pytest.importorskip("horovod." + name.split(".")[1], exc_type=ImportError)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             verbose=False)
    assert result.attempted > 0, f"{name}: no example ran"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
