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
from clink.runtime.registry import BUILT_IN, default_registry

__all__ = [
    "BUILT_IN",
    "Connector",
    "ConnectorRegistry",
    "OptionSpec",
    "SinkWriter",
    "SourceReader",
    "TableSpec",
    "default_registry",
]
