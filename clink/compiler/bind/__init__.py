"""Syntax tree → typed IR: resolve names against the catalog, type every expression.

The binder walks a script statement by statement. DDL fills the catalog; ``SET`` fills the
configuration; each ``INSERT`` and bare ``SELECT`` becomes an ``ir.Sink`` over a typed relation.
Unknown names are collected within a statement and reported together, each with the nearest
known name suggested.

One module per clause: ``ddl`` (CREATE TABLE / VIEW / FUNCTION, SET), ``queries`` (SELECT
blocks, UNION ALL), ``relations`` (FROM items, scans, joins), ``windows`` (window table
functions, group windows, late rows), ``aggregates`` (GROUP BY, aggregate calls), ``over``
(ROW_NUMBER, OVER aggregates) and ``exprs`` (expressions), each a mixin of the one ``Binder``
class in ``statements``; ``scope`` holds what they share.
"""

from __future__ import annotations

from clink.compiler.bind.aggregates import aggregate_signature
from clink.compiler.bind.statements import BoundScript, BoundStatement, bind_script
from clink.compiler.rewrite.limit_ranks import check_ranks_limited

__all__ = ["BoundScript", "BoundStatement", "aggregate_signature", "bind_script", "check_ranks_limited"]
