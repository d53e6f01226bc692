"""A TCP proxy the test puts between one worker and PostgreSQL, and can pause.

Paused, it forwards nothing in either direction but keeps every connection open: to
both ends it looks like a network that went silent, not one that refused or reset.
"""

from __future__ import annotations

import contextlib
import glob
import os
import selectors
import socket
import threading


class PausableProxy:
    def __init__(self, target_host: str, target_port: int, port: int = 0) -> None:
        # A host that is a directory is PostgreSQL's Unix socket directory (the embedded
        # server listens only there): the proxy then forwards to its socket file.
        self.target = (target_host, target_port)
        self.unix_socket: str | None = None
        if target_host.startswith("/"):
            found = sorted(glob.glob(os.path.join(target_host, ".s.PGSQL.*")))
            found = [f for f in found if not f.endswith(".lock")]
            if not found:
                raise OSError(f"no PostgreSQL socket in {target_host}")
            self.unix_socket = found[0]
        self.listener = socket.create_server(("127.0.0.1", port))
        self.port: int = self.listener.getsockname()[1]
        self.running = threading.Event()  # set: forwarding
        self.running.set()
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        accept = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        accept.start()
        self._threads.append(accept)

    def pause(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def close(self) -> None:
        self._closed.set()
        self.running.set()
        for sock in [self.listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            # A new connection while paused waits too, as it would on a silent network.
            self.running.wait()
            try:
                if self.unix_socket is not None:
                    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    server.connect(self.unix_socket)
                else:
                    server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._sockets += [client, server]
            pump = threading.Thread(target=self._pump, args=(client, server),
                                    name="proxy-pump", daemon=True)
            pump.start()
            self._threads.append(pump)

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peers = {client: server, server: client}
        with selectors.DefaultSelector() as selector:
            for sock in peers:
                selector.register(sock, selectors.EVENT_READ)
            while not self._closed.is_set():
                self.running.wait()
                for key, _ in selector.select(timeout=0.1):
                    if not self.running.is_set():
                        break  # paused mid-round: leave the bytes where they are
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(65536)
                        if not data:
                            raise OSError("closed")
                        peers[sock].sendall(data)
                    except OSError:
                        for end in peers:
                            end.close()
                        return
