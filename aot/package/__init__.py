"""The package: generated sources, runtime, build files and manifest, written atomically."""
