"""A record logged while the capture is adding another, in the same thread: a finaliser
that the garbage collector runs in the middle of an add (an un-retrieved future's
"exception was never retrieved", a connection deleted while open), or a signal handler.
Python's own logging takes a re-entrant lock for this reason; a plain lock here stops
the thread for good, and when that thread is the worker's event loop, the whole worker
(it then ignores SIGTERM: the soak's worker that did not stop)."""

from __future__ import annotations

import logging
import threading

from pgbaton import job_logs


class InterruptedRecord(logging.LogRecord):
    """A record whose reading, inside the capture's add, is interrupted by another
    record in the same thread: where a garbage collection that runs a logging finaliser
    can land, made certain."""

    interrupted = False

    @property  # type: ignore[override]
    def levelname(self) -> str:
        if not self.interrupted:
            self.interrupted = True
            logging.getLogger("finaliser").warning("logged by a finaliser mid-add")
        return logging.getLevelName(self.levelno)

    @levelname.setter
    def levelname(self, value: str) -> None:
        pass


def test_a_record_logged_during_an_add_in_the_same_thread_does_not_stop_it() -> None:
    outcome: dict[str, object] = {}

    def attempt() -> None:
        log = job_logs.begin(logging.INFO)
        job_logs.install()
        try:
            record = InterruptedRecord("handler", logging.WARNING, __file__, 1,
                                       "a line of the handler's own", None, None)
            logging.getLogger("handler").handle(record)
        finally:
            job_logs.uninstall()
        outcome["taken"] = log.take()

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the capture deadlocked on a record logged inside an add"
    taken = outcome["taken"]
    assert isinstance(taken, tuple)
    lines, dropped = taken
    assert sorted(line["message"] for line in lines) == [
        "a line of the handler's own", "logged by a finaliser mid-add"]
    assert dropped == 0
