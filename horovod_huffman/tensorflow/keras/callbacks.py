"""Horovod's Keras callbacks for Keras 3: starting weights from one rank, metrics averaged over
ranks. Same names and arguments as ``horovod.tensorflow.keras.callbacks``."""
import keras
import tensorflow as tf

import horovod.tensorflow as hvd

from ..variables import tf_variables


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Sets every rank's model and optimizer variables to ``root_rank``'s when training starts
    (at the end of the first batch instead, where the model has no variables yet), so that all
    ranks train the same model from the first step."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self._local = {v.ref() for v in tf_variables(local_variables or [])}
        self.broadcast_done = False

    def _broadcast(self):
        variables = [v for v in tf_variables(self.model.variables) if v.ref() not in self._local]
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            variables += tf_variables(optimizer.variables)
        with tf.device(self.device):
            hvd.broadcast_variables(variables, root_rank=self.root_rank)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if not self.broadcast_done and self.model.variables:
            self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces each metric in the epoch's logs by its average over ranks (Horovod's allreduce,
    in sorted name order, so that every rank issues the same collectives), before the callbacks
    after it (progress bar, checkpoints, early stopping) read them."""

    def __init__(self, device=""):
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        with tf.device(self.device):
            for metric in sorted(logs):
                value = tf.constant(logs[metric], dtype=tf.float64)
                logs[metric] = float(hvd.allreduce(value, op=hvd.Average,
                                                   name=f"MetricAverageCallback.{metric}"))
