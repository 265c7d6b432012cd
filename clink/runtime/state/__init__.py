"""Keyed state: key groups and window state."""

from __future__ import annotations

from clink.runtime.state.keygroups import DEFAULT_MAX_PARALLELISM, hash_columns, key_groups
from clink.runtime.state.window_state import KEY_GROUP, WINDOW_END, WindowState

__all__ = ["DEFAULT_MAX_PARALLELISM", "KEY_GROUP", "WINDOW_END", "WindowState", "hash_columns", "key_groups"]
