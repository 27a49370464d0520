"""The one exception every decoder raises on bad input."""


class DecodeError(ValueError):
    """A stream is truncated, corrupted, forged, or exceeds a caller's limit.

    The message names the field or check that failed. Subclasses ValueError so callers that
    already guard parsing with ``except ValueError`` keep working.
    """
