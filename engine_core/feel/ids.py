"""Name-based ids for FEEL's ``uuid()``: RFC 4122 version 5, computed, never random.

The core reads no clock and draws no random numbers, so a model's ``uuid()`` gets an id
derived from the instance id and the checkpoint's counter: unique across instances
(instance ids are) and within one (the counter only grows), and the same on a replay of
the same checkpoint — which is what makes a redelivered trigger idempotent.
"""

from __future__ import annotations

import hashlib

__all__ = ["name_based_uuid"]

# A fixed namespace for these ids (itself a version 4 UUID, written once).
_NAMESPACE = bytes.fromhex("6f2c1d0e8a4b4c7e9b3a5d1f0e2c4a6b")


def name_based_uuid(name: str) -> str:
    """The version 5 UUID of ``name`` in our namespace, in its 8-4-4-4-12 text form."""
    digest = bytearray(hashlib.sha1(_NAMESPACE + name.encode("utf-8")).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
