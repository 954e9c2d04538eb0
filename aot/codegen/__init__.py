"""Code generation helpers shared by every backend (C identifiers, comments, literals)."""
