"""Running another project's script unmodified, with what it prints kept."""
import runpy
import sys


def run_capturing(script, argv):
    """Run ``script`` as ``__main__`` with ``argv`` (its arguments), printing as it prints;
    return the lines it printed through ``print``."""
    lines = []

    def capture(*values, **kwargs):
        print(*values, **kwargs)
        lines.append(" ".join(str(v) for v in values))

    sys.argv = [script, *argv]
    runpy.run_path(script, init_globals={"print": capture}, run_name="__main__")
    return lines
