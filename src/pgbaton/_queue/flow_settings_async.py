"""Flow settings (async source), docs/explanation/flow_control.md: pause and resume a
queue, its concurrency and rate limits (per queue and per limit key), priority aging,
and the settings as stored. Each takes effect for the claims that begin after it: the
engine reads the flow state again (engine.flow_changed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._checks import check_name
from ..flow import QueueSettings, Rate, check_aging, check_concurrency, parse_rate
from .core_async import AsyncQueueCore


class AsyncFlowSettings(AsyncQueueCore):
    """A queue's flow: pause, resume, limits and rates, aging, and its settings."""

    async def pause(self, queue: str) -> None:
        """Claims that begin from now on take none of this queue's jobs; running ones
        finish. Stays paused, across restarts, until resume()."""
        await self._set_paused(queue, True)

    async def resume(self, queue: str) -> None:
        """Let the queue's jobs be claimed again, and wake its workers."""
        await self._set_paused(queue, False)

    async def _set_paused(self, queue: str, paused: bool) -> None:
        params = {"name": check_name("queue", queue), "paused": paused,
                  "channel": self.channel}
        await self._fetch("queue_set_paused", params)
        self.engine.flow_changed()

    async def set_concurrency(self, queue: str, concurrency: int | None) -> QueueSettings:
        """At most `concurrency` of the queue's jobs held at once, fleet-wide (None: no
        limit). Takes effect for the claims that begin after it, without restarts."""
        return await self._set_limits(
            queue, set_concurrency=True, concurrency=check_concurrency(concurrency)
        )

    async def set_rate(self, queue: str, rate: object) -> QueueSettings:
        """At most so many starts in any sliding window: "100/s", "10/min", a
        `(limit, seconds)` pair or a `Rate`; None removes the limit."""
        return await self._set_limits(queue, set_rate=True, rate=parse_rate(rate))

    async def set_key_concurrency(
        self, queue: str, concurrency: int | None
    ) -> QueueSettings:
        """At most `concurrency` jobs of each limit key (enqueue's `limit_key=`) of the
        queue held at once, fleet-wide; None removes the limit."""
        return await self._set_limits(
            queue, set_key_concurrency=True, key_concurrency=check_concurrency(concurrency)
        )

    async def set_key_rate(self, queue: str, rate: object) -> QueueSettings:
        """At most so many starts of each limit key of the queue per sliding window."""
        return await self._set_limits(queue, set_key_rate=True, key_rate=parse_rate(rate))

    async def _set_limits(
        self,
        queue: str,
        *,
        set_concurrency: bool = False,
        concurrency: int | None = None,
        set_rate: bool = False,
        rate: Any = None,
        set_key_concurrency: bool = False,
        key_concurrency: int | None = None,
        set_key_rate: bool = False,
        key_rate: Any = None,
    ) -> QueueSettings:
        params = {
            "name": check_name("queue", queue), "channel": self.channel,
            "set_concurrency": set_concurrency, "concurrency": concurrency,
            "set_rate": set_rate,
            "rate_limit": None if rate is None else rate.limit,
            "rate_period": None if rate is None else rate.period,
            "set_key_concurrency": set_key_concurrency, "key_concurrency": key_concurrency,
            "set_key_rate": set_key_rate,
            "key_rate_limit": None if key_rate is None else key_rate.limit,
            "key_rate_period": None if key_rate is None else key_rate.period,
        }
        await self._fetch("queue_set_limits", params)
        self.engine.flow_changed()
        (settings,) = await self.queue_settings(queue)
        return settings

    async def apply_limits(
        self, limits: Mapping[str, tuple[int | None, Rate | None]]
    ) -> None:
        """Write the limits an App declares (App.limit), each only where named: what a
        worker does as it starts, so that code wins then
        (docs/explanation/flow_control.md)."""
        for name, (concurrency, rate) in limits.items():
            if concurrency is not None:
                await self.set_concurrency(name, concurrency)
            if rate is not None:
                await self.set_rate(name, rate)

    async def set_aging(
        self, queue: str, *, every: float | None, step: int = 1, cap: int = 0
    ) -> QueueSettings:
        """Priority aging: every `every` seconds the leader raises the priority of the
        queue's jobs due at least that long by `step`, up to `cap`. every=None: off."""
        aging = check_aging(every, step, cap)
        params = {
            "name": check_name("queue", queue),
            "every": None if aging is None else aging.every,
            "step": None if aging is None else aging.step,
            "cap": None if aging is None else aging.cap,
        }
        await self._fetch("queue_set_aging", params)
        (settings,) = await self.queue_settings(queue)
        return settings

    async def queue_settings(self, queue: str | None = None) -> list[QueueSettings]:
        """Every queue that has a setting or a pending or held job (or just `queue`),
        with its settings and how many of its jobs are held now."""
        name = None if queue is None else check_name("queue", queue)
        rows = await self._fetch("queue_settings_list", {"name": name})
        return [QueueSettings.from_row(row) for row in rows]
