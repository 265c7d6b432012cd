"""JSON documents that carry a checksum of their own bytes (checkpoint and artefact manifests).

The checksum is the sha256 of the document's bytes with the checksum's own value written as 64
zeros, so any changed byte — in a field no reader looks at, or in the checksum — is found.
"""

from __future__ import annotations

import hashlib
import json

__all__ = ["SEAL", "seal", "unseal"]

#: The field that holds the checksum.
SEAL = "manifest_sha256"
_ZEROS = "0" * 64


def seal(document: dict) -> bytes:
    """``document`` as indented, key-sorted JSON bytes that carry their own checksum."""
    body = json.dumps({**document, SEAL: _ZEROS}, indent=1, sort_keys=True).encode()
    return body.replace(_ZEROS.encode(), hashlib.sha256(body).hexdigest().encode(), 1)


def unseal(data: bytes) -> dict:
    """The document in ``data`` (without the checksum field); ValueError if it is not JSON or
    does not match its checksum."""
    document = json.loads(data.decode("utf-8"))
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    checksum = document.get(SEAL)
    if not isinstance(checksum, str) or len(checksum) != 64 or data.count(checksum.encode()) != 1:
        raise ValueError(f"no {SEAL}")
    if hashlib.sha256(data.replace(checksum.encode(), _ZEROS.encode(), 1)).hexdigest() != checksum:
        raise ValueError("it does not match its own checksum")
    del document[SEAL]
    return document
