"""Contractions (sums of products) shared by Conv, Gemm and MatMul: register tiles and row updates."""
