"""clink's version: a ground-floor module that the compiler and the runtime import without
importing the ``clink`` package's public surface (and with it, each other)."""

__version__ = "0.2.0"
