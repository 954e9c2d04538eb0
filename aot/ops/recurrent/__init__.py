"""RNN, GRU and LSTM (see lowering.py); importing the package registers their lowering."""

from aot.ops.recurrent import lowering

__all__ = ["lowering"]
