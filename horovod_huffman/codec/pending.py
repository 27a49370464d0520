"""Pendings that are not collectives (exchange/allreduce.py: ``done()`` never blocks, ``wait()``
blocks and gives the value): a value known at once, work queued to run with other work (the
exchanges' device encodes and sums, a decode group's verdict), and lists of either joined.
"""


class Ready:
    """A Pending whose value is known now."""

    def __init__(self, value):
        self.value = value

    @staticmethod
    def done():
        return True

    def wait(self):
        return self.value


class Queued:
    """A Pending of work queued on ``runner`` (anything with ``run()``):
    ``flush`` runs it; ``wait`` runs it if need be, then raises ``error`` or gives
    ``result()``. A subclass says when it is ``done``."""
    runner = None
    error = None

    def flush(self):
        self.runner.run()

    def wait(self):
        if not self.done():
            self.flush()
        if self.error is not None:
            raise self.error
        return self.result()


class Joined:
    """A Pending of one list: the lists that ``pendings`` (Pendings of lists) give, end to end
    in their order. ``flush`` flushes every queued one not yet done."""

    def __init__(self, pendings):
        self.pendings = list(pendings)

    def done(self):
        return all(p.done() for p in self.pendings)

    def flush(self):
        for p in self.pendings:
            if not p.done() and hasattr(p, "flush"):
                p.flush()

    def wait(self):
        return [value for p in self.pendings for value in p.wait()]
