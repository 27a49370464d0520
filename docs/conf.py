"""Sphinx configuration of the documentation site: the Markdown documents in this folder (MyST)
and an API reference generated from the package's docstrings.

    .venv/bin/python -m sphinx -W --keep-going -b html docs docs/_build/html

tests/test_docs.py builds it so, warnings as errors.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# TensorFlow's start-up logging, which the API reference's imports would print.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod_huffman  # noqa: E402

project = "horovod-huffman"
author = "the horovod-huffman authors"
release = version = horovod_huffman.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.viewcode"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
# Only this package's own docstrings: torch's and Keras's base classes use their own markup.
autodoc_inherit_docstrings = False
autodoc_typehints = "none"

html_theme = "alabaster"
html_title = "horovod-huffman"
