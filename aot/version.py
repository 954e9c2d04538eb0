"""The version of aot, in a module of its own so that any module can read it without importing
the `aot` package facade (whose `compile` imports aot.compiler: reading `aot.__version__` from
inside the compiler would be an import cycle)."""

__version__ = "0.1.0"
