"""What the worker hears of cancels on its LISTEN session (`<schema>_cancelled`), and
what it does about each: docs/explanation/architecture.md, "Cancels delivered".

A notification naming a job the worker holds doubts it (HeldJobs.doubt) and makes the
heartbeat beat now; the fenced beat stops what is no longer held, and a job not started
waits for it. One naming a job not held is kept: a claim whose answer is on its way may
bring that job; when more come than are kept (anyone may NOTIFY), the claims on their
way when one was pushed out are doubted whole. A LISTEN session that is new (None)
doubts everything held, and every claim sent before it: cancels may have gone to nobody
meanwhile. The worker's own echoes (worker/echo.py) pass through here too.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

from ..models import Claim
from .echo import Echo
from .held import HeldJobs

# Cancels heard for jobs this worker does not hold are kept, at most this many, the
# oldest pushed out first: a claim whose answer is on its way may bring one
# (Cancels.claimed).
MAX_CANCELS_KEPT = 1024


class Cancels:
    def __init__(
        self, held: HeldJobs, echo: Echo, beat_now: Callable[[], None], stats: Counter[str]
    ) -> None:
        self._held = held
        self._echo = echo
        self._beat_now = beat_now  # Heartbeat.beat_now
        self._stats = stats  # cancels_heard
        # Job id -> when its cancel was heard, for jobs not held then (heard).
        self.unheld: dict[int, float] = {}
        # When the latest cancel pushed out of `unheld` was heard: a claim sent before
        # that may bring its job, unrecognised (claimed).
        self._pushed_out_heard_at = -math.inf
        self._listening_since = 0.0  # when the LISTEN session last became new

    def heard(self, payload: str | None) -> None:
        """A running job was cancelled (payload: its id, as anyone may send it), or
        cancels may have gone to nobody (None: the LISTEN connection is new). A job this
        worker holds, or any after a reconnect: beat now, and the fenced beat stops what
        is no longer held; a job not started waits for that beat (HeldJobs.doubt)."""
        if payload is None:
            self._held.listening = True
            self._listening_since = self._held.now()
            if len(self._held):
                for running in self._held:
                    self._held.doubt(running, renew=True)
                self._beat_now()
            return
        if self._echo.heard(payload):
            return
        # The trigger's payload is an id as PostgreSQL prints it; anything else ("0042",
        # " 42", "4_2", which int() would take) is not one of ours.
        if not (payload.isascii() and payload.isdigit()) or payload != str(int(payload)):
            return
        job_id = int(payload)
        mine = [r for r in self._held if r.claim.id == job_id and not (r.finished or r.lost)]
        if mine:
            self._stats["cancels_heard"] += 1
            for running in mine:
                self._held.doubt(running)
            self._beat_now()
            return
        # Not held, unless a claim is on its way with it: its cancel may have committed
        # after the claim and before the claim's answer. Kept for claimed(), which
        # takes only those heard since the claim was sent. Oldest first (a dict keeps
        # its order): past the cap the oldest goes, one step a notification however
        # many come, and when it was heard stays (_pushed_out_heard_at).
        self.unheld.pop(job_id, None)
        self.unheld[job_id] = self._held.now()
        if len(self.unheld) > MAX_CANCELS_KEPT:
            oldest = next(iter(self.unheld))
            self._pushed_out_heard_at = max(self._pushed_out_heard_at,
                                            self.unheld.pop(oldest))

    def deaf(self) -> None:
        """The LISTEN session is gone: cancels may go unheard until it is back, so jobs
        claimed ahead have their start written first meanwhile (worker/starter.py)."""
        self._held.listening = False
        self._held.echo_heard = -math.inf

    def claimed(self, claims: list[Claim], sent_at: float) -> None:
        """A claim sent at `sent_at` brought these jobs, held now: doubt those a cancel
        may have reached unheard, and beat."""
        doubted = False
        if sent_at < self._listening_since and self._held.listening:
            # Sent before the LISTEN session was new: a cancel may have gone to nobody
            # before the claim's answer came, and the session's own doubt missed these.
            self._doubt(claims, renew=True)
            doubted = True
        elif sent_at <= self._pushed_out_heard_at:
            # A cancel heard while this claim was on its way was pushed out by a flood:
            # it may name any of these.
            self._doubt(claims, renew=False)
            doubted = True
        if self.unheld:
            # Cancelled while this claim's answer was on its way (heard since it was
            # sent, however long it took)? One heard before, the claim itself saw.
            named = [c for c in claims if (at := self.unheld.pop(c.id, None)) is not None
                     and at >= sent_at]
            self._doubt(named, renew=False)
            self._stats["cancels_heard"] += len(named)
            doubted = doubted or bool(named)
        if doubted:
            self._beat_now()

    def _doubt(self, claims: list[Claim], *, renew: bool) -> None:
        for claim in claims:
            running = self._held.get(claim.token)
            if running is not None:
                self._held.doubt(running, renew=renew)
