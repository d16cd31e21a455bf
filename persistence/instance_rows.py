"""An ``instances`` row read back as the checkpoint it holds.

The row's ``checkpoint`` column leaves out what the row's own columns say: the
instance's id and its process key (engine_core/checkpoint.py ``ROW_IDENTITY``,
``encode_row_json``). Every reader that decodes a stored checkpoint goes through here,
with those two columns beside it; the Store's trigger path splices the same way, on
the text it hands to the core.
"""

from __future__ import annotations

from typing import Any

from dormant.engine_core.checkpoint import Checkpoint, decode, with_row_identity

__all__ = ["checkpoint_of"]


def checkpoint_of(row: Any) -> Checkpoint:
    """The checkpoint of a row read with ``id``, ``key`` and ``checkpoint``; a corrupt
    or too-new document raises ``decode``'s classified error."""
    return decode(with_row_identity(row.checkpoint, row.id, row.key))
