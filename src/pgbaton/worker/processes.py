"""Several worker processes under one supervisor (`pgbaton worker --processes N`).

Each child is `python -m pgbaton.worker.child`, started in a session of its own and
handed its settings (the DSN and its password included) as JSON on its standard input,
never on a command line that `ps` shows. Signals reach the children only through the
supervisor, once each: a SIGTERM sent to the whole process group (systemd, Ctrl-C) gives
each child one graceful stop with the full grace; a second one stops them at once. A
child that dies is restarted with backoff; one that keeps dying stops the supervisor.
When the supervisor dies, its children see their standard input close and stop.

Exit status: 0 after a clean stop, 1 when a child crashed and could not be kept up, or
when any child's last exit was not clean.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time

from .config import WorkerConfig

logger = logging.getLogger("pgbaton.worker")

RESTART_START_SECONDS = 0.5
RESTART_MAX_SECONDS = 30.0
CRASH_LIMIT = 5  # crashes of one child within CRASH_WINDOW end the supervisor
CRASH_WINDOW = 60.0


@dataclasses.dataclass
class _Child:
    slot: int
    process: subprocess.Popen[bytes]
    crashes: list[float] = dataclasses.field(default_factory=list)
    restart_at: float | None = None


def hand_settings(child: subprocess.Popen[bytes], payload: bytes) -> None:
    """Write a child's settings to its standard input, kept open afterwards: its closing
    tells the child that the supervisor is gone."""
    assert child.stdin is not None
    try:
        child.stdin.write(payload)
        child.stdin.flush()
    except BrokenPipeError:
        # Killed before it read them: the supervisor's loop sees it dead, like any crash.
        logger.warning("supervisor: worker process %d died before it read its settings",
                       child.pid)


class ProcessSupervisor:
    def __init__(self, app_spec: str, schema: str, config: WorkerConfig) -> None:
        self.app_spec = app_spec
        self.schema = schema
        self.config = config
        self.children: list[_Child] = []
        self.signals = 0
        self.crashed = False

    def _spawn(self, slot: int) -> subprocess.Popen[bytes]:
        settings = dataclasses.asdict(self.config)
        settings.update(processes=1, worker_id=None)
        if self.config.stats_path:
            settings["stats_path"] = f"{self.config.stats_path}.{slot}"
        if self.config.metrics_port:
            settings["metrics_port"] = self.config.metrics_port + slot
        payload = json.dumps({"app": self.app_spec, "schema": self.schema,
                              "config": settings})
        child = subprocess.Popen(
            [sys.executable, "-m", "pgbaton.worker.child"],
            stdin=subprocess.PIPE, start_new_session=True,
        )
        hand_settings(child, payload.encode() + b"\n")
        return child

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.signals += 1
        if self.signals > 2:
            return
        logger.info("supervisor: %s stop for %d worker processes",
                    "graceful" if self.signals == 1 else "immediate", len(self.children))
        for child in self.children:
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.children = [_Child(slot, self._spawn(slot))
                         for slot in range(self.config.processes)]
        logger.info("supervisor %d: started %d worker processes: %s", os.getpid(),
                    len(self.children), [c.process.pid for c in self.children])
        while True:
            now = time.monotonic()
            alive = 0
            for child in self.children:
                status = child.process.poll()
                if status is None:
                    alive += 1
                    continue
                if self.signals or self.crashed:
                    continue  # stopping: it is meant to end
                if child.restart_at is None:
                    self._crashed(child, status, now)
                    alive += 1  # to be restarted
                elif now >= child.restart_at:
                    child.restart_at = None
                    child.process = self._spawn(child.slot)
                    logger.warning("supervisor: restarted worker process %d as pid %d",
                                   child.slot, child.process.pid)
                    alive += 1
                else:
                    alive += 1
            if not alive:
                break
            time.sleep(0.1)
        statuses = [c.process.returncode for c in self.children]
        # A child that the stop's SIGTERM reached before it set its own handler (still
        # starting) ended by that signal's default action: it had claimed nothing, so it
        # stopped as asked, not crashed.
        asked = (0, -signal.SIGTERM) if self.signals else (0,)
        clean = not self.crashed and all(s in asked for s in statuses)
        logger.info("supervisor: every worker process has ended (%s): exit %d",
                    statuses, 0 if clean else 1)
        return 0 if clean else 1

    def _crashed(self, child: _Child, status: int, now: float) -> None:
        how = f"signal {-status}" if status < 0 else f"status {status}"
        child.crashes = [t for t in child.crashes if t > now - CRASH_WINDOW] + [now]
        if len(child.crashes) >= CRASH_LIMIT:
            logger.critical(
                "supervisor: worker process %d died %d times within %g s (last: %s); "
                "stopping every worker process", child.slot, len(child.crashes),
                CRASH_WINDOW, how,
            )
            self.crashed = True
            self._on_signal(signal.SIGTERM, None)
            return
        delay = min(RESTART_START_SECONDS * 2 ** (len(child.crashes) - 1),
                    RESTART_MAX_SECONDS)
        logger.error("supervisor: worker process %d (pid %d) died with %s; restarting it "
                     "in %.1f s", child.slot, child.process.pid, how, delay)
        child.restart_at = now + delay
