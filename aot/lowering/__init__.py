"""Lowering: graph IR -> a Program of kernels (kernel IR) plus the storage each tensor needs."""
