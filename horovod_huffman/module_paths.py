"""Short module paths: ``horovod_huffman.<name>`` for the modules that live in a layer's
subpackage (``horovod_huffman.quantizers`` is ``horovod_huffman.codec.quantizers``, and
``horovod_huffman.encoders.rows`` is ``horovod_huffman.codec.encoders.rows``).

An import of a short path gives the very module object of the full path (one module, one set of
classes), registered under both names. The package's own code imports full paths only.
"""
import importlib
import importlib.abc
import importlib.util
import sys

PACKAGE = __name__.rpartition(".")[0]
SHORT = {
    "errors": "codec.errors", "quantizers": "codec.quantizers", "wire": "codec.wire",
    "message": "codec.message", "params": "codec.params", "scratch": "codec.scratch",
    "device": "codec.device", "dlpack": "codec.dlpack", "encoders": "codec.encoders",
    "allreduce": "exchange.allreduce", "buckets": "exchange.buckets",
    "array_ops": "exchange.array_ops", "pipeline": "exchange.pipeline",
    "routing": "exchange.routing", "local": "exchange.local", "feedback": "exchange.feedback",
    "statistics": "exchange.statistics",
    "compile": "tools.compile", "fuzz": "tools.fuzz", "watchdog": "tools.watchdog",
    "bench": "tools.bench",
}
"""Short name (under ``horovod_huffman``) -> full path (under ``horovod_huffman``)."""


def full_path(name):
    """The full module path behind ``name`` (an absolute dotted path), or None when ``name`` is
    not a short path."""
    prefix = PACKAGE + "."
    if not name.startswith(prefix):
        return None
    first, dot, rest = name[len(prefix):].partition(".")
    if first not in SHORT:
        return None
    return prefix + SHORT[first] + dot + rest


class ShortPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A meta path finder whose modules are the full paths' modules."""

    def find_spec(self, name, path=None, target=None):
        full = full_path(name)
        if full is None or importlib.util.find_spec(full) is None:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=False)

    def create_module(self, spec):
        module = importlib.import_module(full_path(spec.name))
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        """Nothing to run (``create_module`` returned the full path's module, already run) but
        to give the module back its own spec, which the import system replaced."""
        module.__spec__ = module.__spec__.loader_state


def install():
    """Put ``ShortPaths`` first on ``sys.meta_path``, once: before the path finder, which would
    load a second copy of a module through a short package path."""
    if not any(isinstance(finder, ShortPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, ShortPaths())
