"""The documentation site and its examples: Sphinx (with MyST for the Markdown documents) builds
docs/ with warnings as errors, so a broken link, a missing document or a docstring the API
reference cannot read fails; and every ```python example in README.md and docs/ runs as written
(tests/workers/doc_examples.py)."""
import re
import subprocess
import sys

from horovod_run import ROOT, excerpt, python_run

# The one reason an example may not run here: it needs a CUDA GPU (benchmarks/gpu_checks.sh runs
# it on a GPU machine).
NOT_HERE = "needs torch with a real CUDA GPU"


def test_site_builds_with_warnings_as_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           "docs", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, excerpt(proc.stdout + proc.stderr)
    api = (tmp_path / "api.html").read_text()
    for name in ("horovod_huffman.torch.Compression", "horovod_huffman.torch.ddp.State",
                 "horovod_huffman.tensorflow.DistributedGradientTape", "horovod_huffman.decode"):
        assert f'id="{name}"' in api, name


def test_every_python_example_in_the_readme_and_docs_runs():
    rc, out = python_run("tests/workers/doc_examples.py", timeout=600)
    assert rc == 0, excerpt(out)
    ran, total = map(int, re.search(r"RAN (\d+) OF (\d+) EXAMPLES", out).groups())
    not_run = re.findall(r"NOT RUN (\S+): (.*)", out)
    assert all(reason == NOT_HERE for _, reason in not_run), not_run
    assert ran + len(not_run) == total and ran >= 10, (ran, total, not_run)
