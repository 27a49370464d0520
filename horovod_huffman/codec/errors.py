"""The one exception every decoder raises on bad input, and the kernels' status codes as it."""
from horovod_huffman.kernels.errors import OK, MESSAGES


class DecodeError(ValueError):
    """A stream is truncated, corrupted, forged, or exceeds a caller's limit.

    The message names the field or check that failed. Subclasses ValueError so callers that
    already guard parsing with ``except ValueError`` keep working.
    """


def check_status(status, encoder_name):
    """Raise DecodeError for a kernel's non-zero status (kernels/errors.py)."""
    if status != OK:
        raise DecodeError(f"{encoder_name}: {MESSAGES.get(int(status), f'status {status}')}")
