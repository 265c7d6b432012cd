"""The web dashboard of a running job (``clink run --ui``, ``clink.ui.serve(job)``).

docs/observability.md, "Dashboard", says what it shows and how it is secured.
"""

from __future__ import annotations

from clink.ui.server import Dashboard, serve

__all__ = ["Dashboard", "serve"]
