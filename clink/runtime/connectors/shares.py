"""Sources made of numbered parts (blocks of generated rows, files), read by several subtasks.

Part ``b`` belongs to subtask ``b % parallelism``, so ``p`` subtasks together read every part once,
and one subtask reads them all in order. A reader's ``Progress`` says how far it got: every part
of its own before ``part`` is done, ``offset`` rows of ``part`` are, and ``later`` holds the rows
already done of some of its later parts (-1: all of it) — after a restore at another
parallelism, parts that other subtasks had started.

Restoring at another parallelism merges the positions of every old subtask into one picture of
the table (``merge``) and gives each new subtask its share of what is left (``share_of``).

>>> old = [Progress(0, 2, part=4, offset=10).position(), Progress(1, 2, part=3, offset=0).position()]
>>> share_of(*merge(old), subtask=0, parallelism=1)
Progress(subtask=0, parallelism=1, part=3, offset=0, later={4: 10})
"""

from __future__ import annotations

from clink.records import field, record

__all__ = ["DONE", "Progress", "merge", "share_of"]

#: In ``Progress.later``: the whole part is done.
DONE = -1


@record(frozen=False)
class Progress:
    """Where one subtask's reader is: see the module docstring."""

    subtask: int
    parallelism: int
    part: int
    offset: int = 0
    later: dict[int, int] = field(factory=dict)

    @classmethod
    def start(cls, subtask: int, parallelism: int) -> Progress:
        return cls(subtask, parallelism, part=subtask)

    def next_part(self) -> None:
        """Move to the next part of this subtask's own."""
        self.part += self.parallelism
        self.offset = self.later.pop(self.part, 0)

    def position(self) -> dict:
        return {"share": [self.subtask, self.parallelism], "part": self.part, "offset": self.offset,
                "later": {str(k): v for k, v in sorted(self.later.items())}}

    @classmethod
    def of(cls, position: dict) -> Progress:
        subtask, parallelism = position["share"]
        return cls(int(subtask), int(parallelism), int(position["part"]), int(position["offset"]),
                   {int(k): int(v) for k, v in position.get("later", {}).items()})


def merge(positions: list[dict]) -> tuple[int, dict[int, int]]:
    """What the subtasks of a run, at their ``positions``, have read of the table together:
    every part before the first is done, and the rows done of the later parts that are begun."""
    progress = [Progress.of(p) for p in positions]
    if not progress:
        return 0, {}
    by_subtask = {p.subtask: p for p in progress}
    parallelism = progress[0].parallelism
    if any(p.parallelism != parallelism for p in progress) or set(by_subtask) != set(range(parallelism)):
        raise ValueError(f"the positions are not those of every subtask of one run: {positions}")
    first = min(p.part for p in progress)
    done: dict[int, int] = {}
    for b in range(first, max(p.part for p in progress)):
        if b < by_subtask[b % parallelism].part:
            done[b] = DONE
    for p in progress:
        if p.offset:
            done[p.part] = p.offset
        done.update(p.later)
    return first, done


def share_of(first: int, done: dict[int, int], *, subtask: int, parallelism: int) -> Progress:
    """The progress of subtask ``subtask`` of ``parallelism`` over a table read up to
    (``first``, ``done``) as ``merge`` gives it."""
    part = first + (subtask - first) % parallelism
    later = {b: v for b, v in done.items() if b % parallelism == subtask and b >= part}
    return Progress(subtask, parallelism, part, later.pop(part, 0), later)
