"""A worker claiming ahead whose open connections go silent for good (a firewall that
drops an idle flow, a NAT that forgot it) while new ones get through: it must go on
starting the jobs it claims ahead, as it goes on beating. The heartbeat bounds its
statements by the lease, and the hot path's are cut off past it (_cut_off.py), so each
goes again on a fresh connection. Effects go straight to the server."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.worker.processes.test_probe_claim_ahead import _effects, run_worker  # noqa: F401
from tests.worker_processes import scalar, wait_until


class FreezingProxy:
    """Forwards TCP to the server; freeze() silences every connection open now, for
    good, in both directions, while later connections are forwarded as usual."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self._frozen: list[threading.Event] = []
        self._sockets: list[socket.socket] = []
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        for frozen in list(self._frozen):
            frozen.set()

    def close(self) -> None:
        self._closed.set()
        for sock in [self.listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
                server = socket.create_connection(self.target)
            except OSError:
                return
            frozen = threading.Event()
            self._frozen.append(frozen)
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, frozen),
                             daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket,
              frozen: threading.Event) -> None:
        peers = {client: server, server: client}
        with selectors.DefaultSelector() as selector:
            for sock in peers:
                selector.register(sock, selectors.EVENT_READ)
            while not self._closed.is_set() and not frozen.is_set():
                for key, _ in selector.select(timeout=0.05):
                    if frozen.is_set():
                        break
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
        # Frozen: the sockets stay open and nothing more is read or sent.
        self._closed.wait()


def test_a_worker_whose_connections_go_silent_still_starts_what_it_claims_ahead(
    run_worker, db, app_schema, queue, dsn  # noqa: F811
):
    """One slot, two claimed ahead, a 2 s lease; every connection open at that moment
    goes silent for good while the first job runs. The jobs then due must all run
    within a few leases, the expired claims of the silent moment reaped by the test."""
    params = conninfo_to_dict(dsn)
    host = str(params.get("host") or "127.0.0.1")
    if host.startswith("/"):
        pytest.skip("needs the server on TCP (PGBATON_TEST_DSN)")
    proxy = FreezingProxy(host, int(params.get("port") or 5432))
    try:
        through = make_conninfo(dsn, host="127.0.0.1", port=str(proxy.port))
        first = queue.enqueue("step", {"seconds": 1.0})
        worker = run_worker("--concurrency", "1", "--claim-ahead", "2", "--lease", "2",
                            "--poll-interval", "0.2", through=through)
        wait_until(lambda: _effects(db, app_schema, first) != [], what="the first began")
        proxy.freeze()
        later = [queue.enqueue("step", {"seconds": 0}) for _ in range(6)]
        wait_until(lambda: queue.reap() >= 0 and scalar(
            db, f"""SELECT count(DISTINCT job_id) FROM "{app_schema}".effects
                    WHERE what = 'end' AND job_id = ANY(%s)""", later) == len(later),
            timeout=20, what="every later job ran, through fresh connections")
        assert worker.stop() == 0
    finally:
        proxy.close()
