"""Built-in connectors, and the registry a new ``RuntimeContext`` starts with."""

from __future__ import annotations

from clink.runtime.connectors.base import (
    Connector,
    ConnectorRegistry,
    OptionSpec,
    SinkWriter,
    SourceReader,
    TableSpec,
)

__all__ = [
    "Connector",
    "ConnectorRegistry",
    "OptionSpec",
    "SinkWriter",
    "SourceReader",
    "TableSpec",
    "default_registry",
]


#: Built-in connectors: name -> (module, attribute). Each is imported when a pipeline first names
#: it, so a pipeline pays only for the connectors it uses (the filesystem connector alone pulls
#: in Arrow's CSV, JSON and Parquet readers).
BUILT_IN = {
    "datagen": ("clink.runtime.connectors.datagen", "DATAGEN"),
    "nexmark": ("clink.runtime.connectors.nexmark", "NEXMARK"),
    "filesystem": ("clink.runtime.connectors.filesystem", "FILESYSTEM"),
    "print": ("clink.runtime.connectors.print", "PRINT"),
    "blackhole": ("clink.runtime.connectors.blackhole", "BLACKHOLE"),
    "sqlite": ("clink.runtime.connectors.sqlite", "SQLITE"),
    "collect": ("clink.runtime.connectors.collect", "COLLECT"),
    "push": ("clink.runtime.connectors.push", "PUSH"),
}


def default_registry() -> ConnectorRegistry:
    """A fresh registry holding every built-in connector."""
    import importlib

    registry = ConnectorRegistry()
    for name, (module, attribute) in BUILT_IN.items():
        registry.register_lazy(name, lambda m=module, a=attribute: getattr(importlib.import_module(m), a))
    return registry
