"""Running another project's script unmodified, with what it prints kept."""
import runpy
import sys
import time


def run_capturing(script, argv):
    """Run ``script`` as ``__main__`` with ``argv`` (its arguments), printing as it prints;
    return (seconds, line) for every line it printed through ``print``, ``seconds`` from
    ``time.perf_counter`` when it was printed."""
    lines = []

    def capture(*values, **kwargs):
        print(*values, **kwargs)
        lines.append((time.perf_counter(), " ".join(str(v) for v in values)))

    sys.argv = [script, *argv]
    runpy.run_path(script, init_globals={"print": capture}, run_name="__main__")
    return lines
