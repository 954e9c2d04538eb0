"""Quantised ops: the integer <-> real mapping (arithmetic.py) and the ONNX ops built on it. The
op modules are registered by aot/ops/__init__.py, not here: the float products import
weights.py from this package, and a package that imported its ops would import the convolutions
from inside their own import."""
