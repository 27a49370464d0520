"""Error feedback: the residuals of quantization, carried into the next step.

``ErrorFeedback`` owns a codec's residuals, one per state key: a client state per bucket part
a rank quantizes (its gradient), and in the two-phase exchange a server state per shard it
requantizes (its summed shard). Each is added to the next step's input of its key before that is
quantized; the bucket scales are then contracted by the least-squares factor
<x, Q(x)> / |Q(x)|^2 (``array_ops.contract``), so the residual never grows: plain error feedback
diverges with QSGD whenever its error exceeds the gradient (s^2 < bucket size;
docs/design.md).

A step's new residuals are staged, and replace the kept ones only when the exchange's reduced
result is finite (``settle``): a step whose reduced bucket holds Inf or NaN, an overflow under
a loss scaler that then skips the step, leaves every residual of that bucket as it was.
"""
from ..codec.device import is_device_array


class ErrorFeedback:
    """Residuals keyed by state, for the exchanges' client (``client``) and two-phase server
    (``server``) sides; either side may be off. ``residuals``: {state: 1-D work array (host or
    device)}, what a checkpoint saves and restores."""

    def __init__(self, client, server):
        self.client, self.server = bool(client), bool(server)
        self.residuals = {}
        self._staged = {}

    def quantize(self, ops, quantizer, work, shape, seed, state):
        """QuantizedTensor of ``work`` (1-D, float32/64) plus the residual of ``state`` (where
        one of ``work``'s size and kind of memory is kept) in ``shape``, with contracted bucket
        scales; the new residual (input - sent) is staged under ``state``."""
        residual = self.residuals.get(state)
        if residual is not None and residual.shape == work.shape and \
                is_device_array(residual) == is_device_array(work):
            work = ops.add(work, residual)
        qt = ops.contract(work, quantizer.quantize(work.reshape(shape), seed=seed,
                                                   stream=ops.stream))
        self._staged[state] = ops.residual(work, qt)
        return qt

    def settle(self, ops, states, total, finite=None):
        """End an exchange whose reduced result is ``total``: the residuals it staged under
        ``states`` replace the kept ones if every element of ``total`` is finite; otherwise the
        kept ones stay as they were (none stays none). Every rank reduces the same ``total``,
        so every rank decides alike; an exchange whose ranks each reduce a part passes
        ``finite``, the ranks' agreed answer, instead. On a GPU the decision stays on the
        device (``DeviceOps.keep_if``)."""
        staged = [(state, self._staged.pop(state)) for state in states
                  if state in self._staged]
        if not staged:
            return
        if finite is None:
            finite = ops.all_finite(total)
        for state, residual in staged:
            kept = ops.keep_if(finite, residual, self.residuals.get(state))
            if kept is None:
                self.residuals.pop(state, None)
            else:
                self.residuals[state] = kept

    def forget(self, key):
        """Drop every residual of the bucket ``key`` (states are tuples that start with it)."""
        for state in [s for s in self.residuals if s[0] == key]:
            del self.residuals[state]
