"""Checkpoints: what a consistent snapshot of a job looks like on disk, and how it is verified."""

from clink.runtime.checkpoint.store import (
    CheckpointInfo,
    CheckpointStore,
    CheckpointWriter,
)

__all__ = ["CheckpointInfo", "CheckpointStore", "CheckpointWriter"]
