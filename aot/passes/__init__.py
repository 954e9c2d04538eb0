"""Graph passes, run in the fixed order given by aot.passes.pipeline."""
