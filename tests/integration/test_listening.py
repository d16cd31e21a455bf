"""The console's and the API's "ready." line means the socket listens
(tasks/console/listening.py): a caller that connects the moment it reads the line is
never refused."""

from __future__ import annotations

import socket
import threading

from starlette.applications import Starlette

from dormant.tasks.console import listening


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_announcement_comes_once_the_socket_listens() -> None:
    port = _free_port()
    outcome: list[str] = []
    servers: list[object] = []

    def announce() -> None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            outcome.append("connected")
        except OSError as exc:
            outcome.append(f"refused: {exc}")
        finally:
            for server in servers:
                server.should_exit = True  # type: ignore[attr-defined]

    original = listening._AnnouncingServer.__init__

    def keep(self: listening._AnnouncingServer, *args: object) -> None:
        original(self, *args)  # type: ignore[arg-type]
        servers.append(self)

    listening._AnnouncingServer.__init__ = keep  # type: ignore[method-assign]
    try:
        thread = threading.Thread(
            target=listening.serve_then_announce,
            args=(Starlette(), announce),
            kwargs={"host": "127.0.0.1", "port": port, "log_level": "warning"},
            daemon=True,
        )
        thread.start()
        thread.join(30)
    finally:
        listening._AnnouncingServer.__init__ = original  # type: ignore[method-assign]
    assert outcome == ["connected"], outcome
    assert not thread.is_alive()
