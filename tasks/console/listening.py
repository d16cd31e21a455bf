"""Serve an app under uvicorn and say it is ready only once its socket listens.

``dormant console`` and ``dormant api`` print one "ready." line that scripts, process
managers and the tests wait for. Logged before ``uvicorn.run``, it came before the
socket was bound, and a caller that connected on seeing it was refused now and then;
logged from the server's own start-up, after the bind, it means what it says."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import uvicorn

__all__ = ["serve_then_announce"]


class _AnnouncingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, announce: Callable[[], None]) -> None:
        super().__init__(config)
        self._announce = announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit:
            self._announce()


def serve_then_announce(app: Any, announce: Callable[[], None], **options: Any) -> None:
    """``uvicorn.run(app, **options)``, calling ``announce`` once the socket listens."""
    _AnnouncingServer(uvicorn.Config(app, **options), announce).run()
