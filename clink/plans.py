"""A SQL file's plan, from the plan cache when it was compiled before, else compiled now: what
``clink run``, ``clink explain`` and ``clink test`` start from."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from clink.cache import cached_plan_source, store_plan_source
from clink.errors import UsageError

if TYPE_CHECKING:
    from clink.runtime.plan import Plan


def plan_from_sql(text: str, name: str, *, recompile: bool,
                  init: list[tuple[str, str]] = ()) -> tuple[Plan, str]:
    """The plan of a SQL file and its generated module's source: from the plan cache when this
    text (with the same init scripts) was compiled before (no compiler, no lark), else compiled
    now and cached."""
    from clink.runtime.loader import load_generated, plan_of

    # The cache is keyed by the whole text the compiler reads: init scripts, then the file.
    key = "".join(f"-- init {n}\0{t}\0" for n, t in init) + text
    hit = None if recompile else cached_plan_source(key, name)
    if hit is not None:
        source, fingerprint = hit
        return plan_of(load_generated(source, name=name, fingerprint=fingerprint), name), source
    import gc

    # Importing the compiler and compiling a short file leave ~38,000 more objects that the
    # collector tracks, of which ~1,300 are garbage; the ~100 collector passes this triggers took
    # ~45 of the ~700 ms of CPU of a `clink run --recompile` on a loaded 2-CPU machine. It pauses
    # for the compile only; its next pass frees whatever garbage there was.
    collecting = gc.isenabled()
    gc.disable()
    try:
        from clink.compiler import compile_text

        compiled = compile_text(text, name=name, init=init)
    finally:
        if collecting:
            gc.enable()
    plan = plan_of(load_generated(compiled.source, name=name, fingerprint=compiled.fingerprint), name)
    store_plan_source(key, name, compiled.source, plan.fingerprint)
    return plan, compiled.source


def read_source(path: str | Path, sources: dict[str, str] | None = None, *, what: str = "file") -> tuple[str, str]:
    """The name and text of the UTF-8 file ``path`` (a pipeline, an init script, a case file),
    kept in ``sources`` under its name for errors with a caret; ``what`` names it in the error
    when it cannot be read."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"no such {what}: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
    if sources is not None:
        sources[p.name] = text
    return p.name, text
