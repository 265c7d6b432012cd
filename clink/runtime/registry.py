"""Connectors by name: the registry each ``RuntimeContext`` carries, and the built-in ones.

This module imports nothing of the runtime, so the context can hold a registry without the
context and the connectors importing each other: built-in connectors are named here by module
and imported when a pipeline first uses them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["BUILT_IN", "ConnectorRegistry", "default_registry"]

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
    "redis": ("clink.runtime.connectors.redis", "REDIS"),
    "kafka": ("clink.runtime.connectors.kafka", "KAFKA"),
    "upsert-kafka": ("clink.runtime.connectors.kafka", "UPSERT_KAFKA"),
    "jdbc": ("clink.runtime.connectors.jdbc", "JDBC"),
    "collect": ("clink.runtime.connectors.collect", "COLLECT"),
    "push": ("clink.runtime.connectors.push", "PUSH"),
    "values": ("clink.runtime.connectors.values", "VALUES"),
}

#: A connector (``clink.runtime.connectors.base.Connector``): anything with a ``name``.
Connector = Any


class ConnectorRegistry:
    """Connectors by name. Each ``RuntimeContext`` has its own; nothing here is global."""

    def __init__(self, connectors: Iterable[Connector] = ()) -> None:
        self._connectors: dict[str, Connector] = {}
        self._lazy: dict[str, Callable[[], Connector]] = {}
        for connector in connectors:
            self.register(connector)

    def register(self, connector: Connector) -> None:
        self._connectors[connector.name] = connector
        self._lazy.pop(connector.name, None)

    def register_lazy(self, name: str, load: Callable[[], Connector]) -> None:
        """Register connector ``name``, imported by ``load()`` on first use: a pipeline that
        never names it never pays for its imports (cold start)."""
        self._lazy[name] = load
        self._connectors.pop(name, None)

    def get(self, name: str) -> Connector | None:
        load = self._lazy.pop(name, None)
        if load is not None:
            self._connectors[name] = load()
        return self._connectors.get(name)

    def names(self) -> list[str]:
        return sorted({*self._connectors, *self._lazy})

    def __contains__(self, name: str) -> bool:
        return name in self._connectors or name in self._lazy

    def as_mapping(self) -> Mapping[str, Connector]:
        for name in list(self._lazy):
            self.get(name)
        return dict(self._connectors)


def default_registry() -> ConnectorRegistry:
    """A fresh registry holding every built-in connector."""
    registry = ConnectorRegistry()
    for name, (module, attribute) in BUILT_IN.items():
        registry.register_lazy(name, lambda m=module, a=attribute: getattr(importlib.import_module(m), a))
    return registry
