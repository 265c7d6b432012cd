"""The job master's bookkeeping, apart from where workers run: which checkpoint a job resumes
from, and how the parts of a checkpoint that each worker takes become one checkpoint.

A checkpoint of a job spread over workers is the same directory a local run writes
(``<state-dir>/checkpoints/chk-<n>/``, or under ``'execution.checkpointing.dir'``,
docs/checkpoints.md): the job master makes the directory, every worker puts its operators' files
into it and sends back plain values (source positions, operator entries with the size and
checksum of each file, sink handles), and the job master writes ``job.json`` and the manifest
last, only once every worker has answered. So a local run, or a cluster run at another parallelism,
resumes from it like from any other.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from clink.runtime.checkpoint import CheckpointStore
from clink.runtime.checkpoint.store import CheckpointWriter

__all__ = ["Coordinator"]


class Coordinator:
    """Checkpoints of one job attempt: ``begin`` one, ``add`` each worker's parts, ``complete``.

    ``workers`` is how many parts a checkpoint waits for; ``parallelism`` goes into ``job.json``.
    """

    def __init__(self, state_dir: str | Path | None, *, fingerprint: str, parallelism: int, workers: int,
                 retained: int = 3, location: str | None = None) -> None:
        self.store = CheckpointStore(state_dir, retained=retained, location=location)
        self.fingerprint = fingerprint
        self.parallelism = parallelism
        self.workers = workers
        self.next_id = 1
        #: The bytes of the last completed checkpoint's files.
        self.last_size = 0
        self._writer: CheckpointWriter | None = None
        self._parts: dict[int, dict] = {}
        self.completed: list[int] = []

    def resume_point(self, chosen: str | None = None) -> tuple[str | None, list[str]]:
        """The checkpoint directory the workers restore from (``chosen``, else the newest valid
        one; None: start afresh), and warnings about damaged ones passed over. Checkpoints newer
        than it are set aside once here, not by each worker."""
        from clink.runtime.checkpoint.store import ROLLED_BACK

        if chosen:
            info, _ = self.store.open(chosen)
            warnings: list[str] = []
        else:
            info, warnings = self.store.latest()
        if info is not None:
            self.store.release(info)  # verified; each worker reads (or downloads) it itself
        checkpoint_id = info.id if info is not None else 0
        self.store.lineage()  # made here, once, before the workers read it
        moved = self.store.set_aside_after(checkpoint_id)
        if moved:
            resumed = f"checkpoint {checkpoint_id}" if checkpoint_id else "the start"
            warnings.append(f"checkpoint(s) {', '.join(map(str, moved))} newer than {resumed} moved to "
                            f"{self.store.where(ROLLED_BACK)}; the job goes on from {resumed}")
        self.next_id = checkpoint_id + 1
        # Each attempt's workers rebuild their working state from the checkpoint: what earlier
        # attempts' workers left (more of them, before a rescale down) goes.
        working = self.store.state_dir / "state" if self.store.state_dir is not None else None
        for folder in working.glob("worker-*") if working is not None and working.is_dir() else ():
            shutil.rmtree(folder, ignore_errors=True)
        return (info.location if info is not None else None), warnings

    @property
    def pending(self) -> int | None:
        """The id of the checkpoint waiting for parts, if any."""
        return self._writer.id if self._writer is not None else None

    def begin(self) -> int:
        """Make the next checkpoint's directory; the workers are then told to take their parts."""
        if self._writer is not None:
            raise RuntimeError(f"checkpoint {self._writer.id} is still being taken")
        self._writer = self.store.begin(self.next_id, self.fingerprint)
        self._parts = {}
        return self.next_id

    def abandon(self) -> None:
        """A worker failed during the checkpoint: it never completes (its directory has no
        manifest, so it does not count, and the next attempt reuses the id)."""
        self._writer = None
        self._parts = {}

    def add(self, worker: int, checkpoint_id: int, parts: dict) -> bool:
        """Worker ``worker``'s parts of checkpoint ``checkpoint_id``; True once all are in."""
        if self._writer is None or checkpoint_id != self._writer.id:
            return False  # a late answer about an abandoned checkpoint
        self._parts[worker] = parts
        return len(self._parts) == self.workers

    def complete(self) -> tuple[int, dict]:
        """Write ``job.json`` and the manifest; return the checkpoint's id and the sink handles
        the workers commit with."""
        writer = self._writer
        assert writer is not None and len(self._parts) == self.workers
        sources: dict[str, dict] = {}
        operators: dict[str, list] = {}
        signatures: dict[str, str] = {}
        records: dict[str, dict] = {}
        max_parallelism = None
        sinks: dict[str, object] = {}
        for parts in self._parts.values():
            records.update(parts.get("records", {}))
            max_parallelism = parts.get("max_parallelism", max_parallelism)
            for uid, shares in parts["sources"].items():
                sources.setdefault(uid, {}).update(shares)
            for uid, entries in parts["operators"].items():
                operators.setdefault(uid, []).extend(entries)
            signatures.update(parts["signatures"])
            sinks.update(parts["sinks"])
        state_sources = {}
        for uid, shares in sources.items():
            ordered = [shares[str(i)] for i in range(len(shares))]
            state_sources[uid] = ordered[0] if len(ordered) == 1 else {"subtasks": ordered}
        state_operators = {}
        for uid, entries in operators.items():
            entries.sort(key=lambda e: e["index"])
            for entry in entries:
                for name in entry["files"]:
                    writer.record(name, entry["digests"][name])
            entry = {"signature": signatures[uid], **records.get(uid, {})}
            if len(entries) == 1:
                entry.update(files=entries[0]["files"], meta=entries[0]["meta"])
            else:
                entry["subtasks"] = [{k: e[k] for k in ("files", "meta", "key_groups")} for e in entries]
            state_operators[uid] = entry
        state = {"parallelism": self.parallelism, "sources": state_sources, "operators": state_operators,
                 "sinks": sinks, "watermarks": {}, "input_watermarks": {}}
        if max_parallelism is not None:
            state["max_parallelism"] = max_parallelism
        writer.write_bytes("job.json", json.dumps(state, sort_keys=True).encode())
        self.last_size = writer.complete().size
        checkpoint_id = writer.id
        self._writer = None
        self._parts = {}
        self.next_id = checkpoint_id + 1
        self.completed.append(checkpoint_id)
        return checkpoint_id, sinks

    def prune(self) -> None:
        """Drop checkpoints beyond the retained count (after the sinks have committed)."""
        self.store.prune()
