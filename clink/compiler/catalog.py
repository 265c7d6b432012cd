"""Tables and views known while binding a script."""

from __future__ import annotations

import difflib

from clink import records
from clink.compiler import ast, ir


@records.record(kw_only=True)
class CatalogTable:
    """A table from ``CREATE TABLE``: its physical columns (what the connector reads or writes),
    then its computed columns (expressions over the physical ones, evaluated after reading)."""

    info: ir.TableInfo
    computed: tuple[tuple[str, ir.Expr], ...]
    schema: ir.Schema
    definition: ast.CreateTable


@records.record(kw_only=True)
class CatalogView:
    """A view from ``CREATE VIEW``, bound when it was created."""

    name: str
    rel: ir.Rel
    #: Output columns that carry event time (a table's watermark column passed through as is).
    rowtime: frozenset[str] = frozenset()
    #: The CREATE VIEW statement as written.
    text: str = ""


@records.record(frozen=False)
class Catalog:
    tables: dict[str, CatalogTable] = records.field(factory=dict)
    views: dict[str, CatalogView] = records.field(factory=dict)

    def lookup(self, name: str) -> CatalogTable | CatalogView | None:
        return self.tables.get(name) or self.views.get(name)

    def names(self) -> list[str]:
        return sorted({*self.tables, *self.views})


def nearest(name: str, candidates: list[str] | tuple[str, ...]) -> str | None:
    """The candidate closest to ``name`` (case-insensitively), if any is close enough."""
    if not candidates:
        return None
    lowered = {c.lower(): c for c in candidates}
    if name.lower() in lowered:
        return lowered[name.lower()]
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None
