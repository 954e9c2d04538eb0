"""The C backend: kernel IR -> C99 source."""
