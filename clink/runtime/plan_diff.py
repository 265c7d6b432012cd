"""Before a restart with changed SQL: which state the new pipeline keeps, loses or starts afresh.

``clink plan diff old.sql new.sql`` compares two plans; ``clink plan diff new.sql --state-dir
DIR`` compares a plan with the newest valid checkpoint in DIR, which records by stable id every
source position, sink, and stateful operator with its state signature (and, since clink 0.1,
its kind and SQL position). The verdict is the restore's own rule (docs/checkpoints.md,
"Changing a pipeline"; ``executor._Checkpointing.check_compatible``): a checkpoint restores when
every stateful operator of the new plan finds its id with the same state signature, every
source finds its position, and no operator state would be dropped.

Each source, sink and stateful operator gets one verdict:

- ``kept``: same id and state signature (a source: its position is there);
- ``lost``: same id, another signature (why: window, keys, aggregates or layout changed), or
  an operator the new plan no longer has (``operator removed``);
- ``renamed``: an id the old side lacks whose state signature equals that of an old id the new
  side lacks — the same computation under another identity (a renamed table it feeds or reads,
  another UID hint);
- ``new``: an id the old side lacks with nothing to match it: a new stateful operator or source
  makes the restore refuse (it would start with nothing), a new sink just starts;
- ``removed``: a source or sink the new plan no longer has: its position or pre-commit handle is
  dropped, which the restore allows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clink.records import record
from clink.runtime.operators import OperatorEnv, kind_of
from clink.runtime.plan import Sink, Source

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext
    from clink.runtime.plan import Plan

__all__ = ["Change", "Identity", "checkpoint_identities", "compatible", "diff", "plan_identities", "render"]


@record
class Identity:
    """What one side knows of a source, sink or stateful operator."""

    id: str
    kind: str  # source, sink, or the operator kind (group, window, join, ...)
    position: str = ""
    signature: str = ""  # stateful operators only
    backend: str = ""  # stateful operators: the state backend that holds (or will hold) the state


@record
class Change:
    verdict: str  # kept, lost, renamed, new, removed
    id: str
    kind: str
    position: str = ""
    reason: str = ""
    old_id: str = ""

    @property
    def refuses(self) -> bool:
        """Whether a restart with this change refuses the checkpoint (or would lose state)."""
        if self.verdict in ("lost", "renamed"):
            return True
        return self.verdict == "new" and self.kind != "sink"


def plan_identities(plan: Plan, ctx: RuntimeContext) -> dict[str, Identity]:
    """The identities of ``plan``'s sources, sinks and stateful operators. Each stateful operator
    is opened on a scratch memory state (nothing runs) to take its state signature exactly as a
    job computes it."""
    from clink.runtime.context import TaskContext
    from clink.runtime.executor import _duration_ms, signature_of, stable_ids
    from clink.runtime.state.memory import MemoryStateBackend

    ctx = ctx.with_config({**plan.config, **ctx.config})
    max_parallelism = int(ctx.get("pipeline.max-parallelism") or 128)
    backend_name = (ctx.get("state.backend") or "memory").strip().lower()
    backend = MemoryStateBackend(max_parallelism=max_parallelism)
    nodes = {node.id: node for node in plan.nodes}
    uids = stable_ids(plan)
    out: dict[str, Identity] = {}
    for node in plan.nodes:
        uid = uids.get(node.id)
        if uid is None:
            continue
        if isinstance(node, Source | Sink):
            out[uid] = Identity(uid, "source" if isinstance(node, Source) else "sink", node.span)
            continue
        kind = kind_of(node)
        task = TaskContext(runtime=ctx, node_id=node.id, subtask=0, parallelism=1,
                           key_groups=range(0, max_parallelism))
        schemas = tuple(nodes[i].schema for i in node.inputs)
        env = OperatorEnv(task=task, input_schemas=schemas, backend=backend, operator_id=uid,
                          ttl_ms=_duration_ms(ctx.get("table.exec.state.ttl")),
                          input_modes=tuple(nodes[i].changelog for i in node.inputs))
        operator = kind.open(node, env)
        try:
            signature = signature_of(node, schemas, operator)
        finally:
            operator.close()
        out[uid] = Identity(uid, kind.name, node.span, signature, "sqlite" if backend_name == "sqlite" else "memory")
    return out


def checkpoint_identities(state: dict) -> dict[str, Identity]:
    """The identities a checkpoint's ``job.json`` records."""
    out: dict[str, Identity] = {}
    for uid in state.get("sources", {}):
        out[uid] = Identity(uid, "source")
    for uid in state.get("sinks", {}):
        out[uid] = Identity(uid, "sink")
    for uid, entry in state.get("operators", {}).items():
        # A uid is '<kind>-<hash>' or '<kind>:<name>' (a UID hint); the kind is recorded too since 0.1.
        kind = entry.get("kind") or uid.replace(":", "-").split("-", 1)[0]
        shares = entry["subtasks"] if "subtasks" in entry else [entry]
        files = [name for share in shares for name in share.get("files", [])]
        backend = "sqlite" if any(name.endswith(".sqlite") for name in files) else "memory" if files else ""
        out[uid] = Identity(uid, kind, entry.get("span", ""), entry["signature"], backend)
    return out


def diff(old: dict[str, Identity], new: dict[str, Identity]) -> list[Change]:
    """One change per identity of either side: new-side order first, then what only the old side has."""
    changes: list[Change] = []
    gone = [uid for uid, i in old.items() if uid not in new and i.signature]
    renamed: dict[str, str] = {}
    for uid, n in new.items():
        if uid in old or not n.signature:
            continue
        match = next((g for g in gone if g not in renamed.values() and old[g].kind == n.kind
                      and old[g].signature == n.signature), None)
        if match is not None:
            renamed[uid] = match
    for uid, n in new.items():
        o = old.get(uid)
        if n.kind in ("source", "sink"):
            if o is not None:
                changes.append(Change("kept", uid, n.kind, n.position,
                                      "its position is restored" if n.kind == "source" else ""))
            elif n.kind == "source":
                changes.append(Change("new", uid, n.kind, n.position, "the checkpoint holds no position for it, so "
                                      "the restore is refused (a source was added)"))
            else:
                changes.append(Change("new", uid, n.kind, n.position, "starts writing; nothing to restore"))
            continue
        if o is None and uid in renamed:
            changes.append(Change("renamed", uid, n.kind, n.position, _renamed_reason(renamed[uid], uid),
                                  old_id=renamed[uid]))
        elif o is None:
            changes.append(Change("new", uid, n.kind, n.position, "the checkpoint holds no state for it, so the "
                                  "restore is refused (a stateful operator was added)"))
        elif o.signature != n.signature:
            changes.append(Change("lost", uid, n.kind, n.position or o.position, _why(o.signature, n.signature)))
        elif o.backend and n.backend and o.backend != n.backend:
            changes.append(Change("lost", uid, n.kind, n.position, f"the state backend changed ({o.backend} to "
                                  f"{n.backend}): a checkpoint restores only into the backend that wrote it"))
        else:
            changes.append(Change("kept", uid, n.kind, n.position, "same state signature"))
    for uid, o in sorted(old.items()):
        if uid in new or uid in renamed.values():
            continue
        if o.kind == "source":
            changes.append(Change("removed", uid, o.kind, o.position, "no longer read; its position is dropped"))
        elif o.kind == "sink":
            changes.append(Change("removed", uid, o.kind, o.position, "no longer written; what it committed stays"))
        else:
            changes.append(Change("lost", uid, o.kind, o.position, "operator removed: the new pipeline has no "
                                  "operator with this identity, so its state would be dropped and the restore is "
                                  "refused"))
    return changes


def compatible(changes: list[Change]) -> bool:
    return not any(c.refuses for c in changes)


def _renamed_reason(old_id: str, new_id: str) -> str:
    return (f"same computation as {old_id} in the old plan, under another identity (a table it reads or feeds "
            f"was renamed, or its UID hint changed). The restore is refused: clink finds state by identity only. "
            f"Keep the old table names to keep the state, or start with a new state directory; naming the "
            f"operator with SELECT /*+ UID('...') */ keeps its identity through later renames")


def _parts(signature: str) -> tuple[str, str, str, str]:
    """(window, keys, aggregates, everything) of an aggregate's signature, from its readable
    half: ``[window ]GROUP BY (types) computing fns as GROUP BY (keys) computing aggregates``."""
    readable = signature.split(" | ")[0]
    described, _, meaning = readable.partition(" as ")
    window = described.split("GROUP BY", 1)[0].strip() if "GROUP BY" in described else ""
    keys, _, aggs = meaning.partition(" computing ")
    if not meaning:
        keys, _, aggs = described.split("GROUP BY", 1)[-1].partition(" computing ")
    return window, keys.strip().removeprefix("GROUP BY").strip(), aggs.strip(), readable


def _why(old: str, new: str) -> str:
    o_window, o_keys, o_aggs, o_readable = _parts(old)
    n_window, n_keys, n_aggs, n_readable = _parts(new)
    if "GROUP BY" not in o_readable or "GROUP BY" not in n_readable:
        if o_readable == n_readable:
            return "the layout of its state changed"
        return f"its state changed: was {o_readable}, now {n_readable}"
    reasons = []
    if o_window != n_window:
        reasons.append(f"window changed: {o_window or 'none'} to {n_window or 'none'}")
    if o_keys != n_keys:
        reasons.append(f"keys changed: {o_keys} to {n_keys}")
    if o_aggs != n_aggs:
        reasons.append(f"aggregates changed: {o_aggs} to {n_aggs}")
    if not reasons and o_readable == n_readable:
        # The same query, kept another way (another clink, or another backend layout).
        reasons.append(f"the layout of its state changed: was {old.split(' | ', 1)[-1]}, now {new.split(' | ', 1)[-1]}")
    elif not reasons:
        reasons.append(f"the types or layout of its state changed: was {o_readable}, now {n_readable}")
    return "; ".join(reasons)


def render(changes: list[Change], *, old: str, new: str) -> str:
    """The report ``clink plan diff`` prints."""
    lines = [f"state of {old} -> {new}:"]
    for c in changes:
        what = f"{c.old_id} -> {c.id}" if c.old_id else c.id
        where = f" (at {c.position})" if c.position else ""
        reason = f": {c.reason}" if c.reason else ""
        lines.append(f"  {c.verdict:<8} {c.kind:<7} {what}{where}{reason}")
    if compatible(changes):
        lines.append("compatible: a restart keeps every operator's state")
    else:
        lines.append("NOT compatible: a restart from this state would be refused; see 'lost', 'renamed' and 'new' "
                     "above (or start with a new state directory)")
    return "\n".join(lines)
