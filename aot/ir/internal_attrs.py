"""Node attributes aot's own passes write for later stages to read (names start with `_aot_`, so
no ONNX attribute can collide with them)."""

# A Concat the patch rewrite (aot/passes/row_patches.py) made to gather the bands of a tensor:
# lowered as one copy kernel per band, so each band's rows die right after their own copy
# instead of all living until the last band is done.
BAND_ASSEMBLY = "_aot_band_assembly"
# On every band's copy of a node: the node's output (its name), which names the node uniquely;
# the --max-arena search gives all bands of a convolution the same form in one step.
BAND_OF = "_aot_band_of"
# On a node a pass made from several of the model's nodes: their names, which name its kernel.
FUSED_FROM = "_aot_fused_from"

# The domain of ops only aot's own passes write (never accepted from a model).
INTERNAL_DOMAIN = "aot.internal"
