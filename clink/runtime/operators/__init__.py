"""Stateful operators the executor runs for plan nodes."""

from __future__ import annotations

from clink.runtime.operators.window import WindowAggregateOperator

__all__ = ["WindowAggregateOperator"]
