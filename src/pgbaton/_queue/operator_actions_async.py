"""Operator actions (async source), the dashboard's and the command line's: retry,
cancel, run now, set a priority, delete.

One job, or every job of a JobFilter up to the newest id the operator saw counted
(count_matching's `upto`): each an ordinary fenced statement that leaves alone a job no
longer in a state the action may change. The actions, their states and statements are
one table, actions.ACTIONS.
"""

from __future__ import annotations

import psycopg

from .._checks import check_job_id
from .._queue_base import action_params, filter_params, matching_params, unique_refused
from ..actions import action_named
from ..events import Event
from ..job_filter import JobFilter
from .core_async import AsyncQueueCore


class AsyncOperatorActions(AsyncQueueCore):
    """act and act_matching, and the named actions over them."""

    async def act(self, action: str, job_id: int, *, priority: int | None = None) -> bool:
        """Do the operator action named `action` (retry, cancel, run_now, set_priority
        or delete; set_priority takes `priority`) to one job: False when the job is
        gone or not in a state the action may leave."""
        chosen = action_named(action)
        params = {"id": check_job_id(job_id), **action_params(chosen, priority, self.channel)}
        try:
            changed = bool(await self._fetch(chosen.one, params))
        except psycopg.errors.UniqueViolation as error:
            raise unique_refused(error, f"job {job_id}") from None
        if not changed and chosen.one_else is not None:
            changed = bool(await self._fetch(chosen.one_else, {"id": params["id"]}))
        if changed and chosen.event is not None and self.events.active:
            self.events.emit(Event(chosen.event, job_id=job_id))
        return changed

    async def act_matching(
        self, action: str, job_filter: JobFilter, *, upto: int, priority: int | None = None
    ) -> int:
        """Do the operator action named `action` to every job of the filter with an id
        up to `upto` (count_matching's) that is in a state the action may leave; the
        number of jobs changed."""
        chosen = action_named(action)
        params = {**matching_params(job_filter, upto),
                  **action_params(chosen, priority, self.channel)}
        try:
            rows = await self._fetch(chosen.matching, params)
        except psycopg.errors.UniqueViolation as error:
            raise unique_refused(error, "a job of the filter") from None
        return int(rows[0]["changed"]) if chosen.wakes else len(rows)

    async def cancel(self, job_id: int) -> bool:
        """Cancel a pending or running job; a running holder loses its claim, but the
        job's key stays held until that holder releases it or its lease runs out."""
        return await self.act("cancel", job_id)

    async def retry(self, job_id: int) -> bool:
        """Send a failed or cancelled job back to pending with a fresh set of attempts;
        a cancelled job whose holder's lease has not run out waits for it first."""
        return await self.act("retry", job_id)

    async def delete(self, job_id: int) -> bool:
        """Delete a job that is not running (a running one would lose its holder's work
        without telling it: cancel it first), or a done job moved to jobs_history."""
        return await self.act("delete", job_id)

    async def run_now(self, job_id: int) -> bool:
        """Make a scheduled pending job due now and wake its queue's workers."""
        return await self.act("run_now", job_id)

    async def set_priority(self, job_id: int, priority: int) -> bool:
        """Change a pending job's priority (higher runs first)."""
        return await self.act("set_priority", job_id, priority=priority)

    async def count_matching(self, action: str, job_filter: JobFilter) -> tuple[int, int]:
        """How many jobs of the filter `action` would change now, and the newest of
        their ids: pass it as `upto` to the *_matching action to act on exactly those
        (and older ones that entered the filter since, never newer ones)."""
        params = {**filter_params(job_filter),
                  "statuses": list(action_named(action).statuses)}
        (row,) = await self._fetch("job_count_matching", params)
        return int(row["count"]), int(row["upto"] or 0)

    async def retry_matching(self, job_filter: JobFilter, *, upto: int) -> int:
        """Send the failed and cancelled jobs of the filter back to pending."""
        return await self.act_matching("retry", job_filter, upto=upto)

    async def cancel_matching(self, job_filter: JobFilter, *, upto: int) -> int:
        """Cancel the pending, running and waiting jobs of the filter."""
        return await self.act_matching("cancel", job_filter, upto=upto)

    async def delete_matching(self, job_filter: JobFilter, *, upto: int) -> int:
        """Delete the jobs of the filter that are not running."""
        return await self.act_matching("delete", job_filter, upto=upto)

    async def run_now_matching(self, job_filter: JobFilter, *, upto: int) -> int:
        """Make the scheduled pending jobs of the filter due now."""
        return await self.act_matching("run_now", job_filter, upto=upto)

    async def set_priority_matching(
        self, job_filter: JobFilter, priority: int, *, upto: int
    ) -> int:
        """Change the priority of the pending jobs of the filter."""
        return await self.act_matching("set_priority", job_filter, upto=upto,
                                       priority=priority)
