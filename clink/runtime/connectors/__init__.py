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


def default_registry() -> ConnectorRegistry:
    """A fresh registry holding every built-in connector."""
    from clink.runtime.connectors.blackhole import BLACKHOLE
    from clink.runtime.connectors.collect import COLLECT
    from clink.runtime.connectors.datagen import DATAGEN
    from clink.runtime.connectors.filesystem import FILESYSTEM
    from clink.runtime.connectors.print import PRINT

    return ConnectorRegistry([DATAGEN, FILESYSTEM, PRINT, BLACKHOLE, COLLECT])
