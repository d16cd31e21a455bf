"""A TCP proxy on loopback that a fault test controls: only the test's own worker
processes connect through it, so a partition it makes touches nothing shared.

Modes, switched at any time:

* ``pass`` — bytes flow both ways;
* ``drop`` — a partition as TCP sees it: bytes are held, not forwarded (nothing
  arrives, nothing is refused), and new connections are accepted but carry nothing;
  on ``pass`` the held bytes flow on, as a retransmission would deliver them;
* ``reset`` — every open connection is closed with RST and new ones are refused
  (accepted and reset at once): a partition long enough that TCP gave up;
* ``delay`` seconds — every chunk waits that long before it is forwarded.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

__all__ = ["Proxy"]


def _rst(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


class Proxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port: int = self.listener.getsockname()[1]
        self.mode = "pass"
        self.delay = 0.0
        self._flowing = threading.Event()
        self._flowing.set()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = False
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    # -- control -------------------------------------------------------------------
    def set(self, mode: str, delay: float = 0.0) -> None:
        assert mode in ("pass", "drop", "reset", "delay"), mode
        self.mode = mode
        self.delay = delay if mode == "delay" else 0.0
        if mode == "drop":
            self._flowing.clear()
        else:
            self._flowing.set()
        if mode == "reset":
            with self._lock:
                pairs, self._pairs = self._pairs, []
            for a, b in pairs:
                _rst(a)
                _rst(b)

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        self.listener.close()
        self.set("reset")

    # -- plumbing ------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.mode == "reset":
                _rst(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _rst(client)
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                if self.delay:
                    time.sleep(self.delay)
                if self._closed:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
