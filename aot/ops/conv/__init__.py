"""Conv: every algorithm of one op. Importing the package registers the op."""

from aot.ops.conv import lowering  # noqa: F401  (registers Conv)
