"""Maintenance (async source): the leader's chores, each a delegate to the engine
(reap, prune, archive, drop_history, vacuum, age_priorities; leader_try_acquire), the
partitions of jobs_history, and the resealing of args under a new key (`pgbaton
rotate-keys`, docs/howto/encryption.md).
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from .._checks import check_int4
from ..encryption import Keyring, ResealCounts, reseal
from ..engine_async import HISTORY_LOCK_WAIT_SECONDS
from ..errors import ArgsRejected
from ..models import HistoryPartition
from .core_async import AsyncQueueCore


class AsyncChores(AsyncQueueCore):
    """The maintenance leader's calls (maintenance/services.py), and rotate-keys'."""

    # How long drop_history waits for a lock on jobs_history before it leaves a
    # partition for its next call (engine.drop_history's lock_wait).
    history_lock_wait: float = HISTORY_LOCK_WAIT_SECONDS

    async def leader_try_acquire(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Try to become the maintenance leader on `conn` (engine.leader_try_acquire)."""
        return await self.engine.leader_try_acquire(conn)

    async def reap(self) -> int:
        """Expired leases go back to pending, or to failed with no attempts left."""
        return await self.engine.reap()

    async def prune(self, *, retention: float, limit: int = 10_000) -> int:
        """Delete done, failed and cancelled jobs that finished more than `retention`
        seconds ago, at most `limit` of them; returns how many went."""
        return await self.engine.prune(retention=retention, limit=limit)

    # The history retention mode (docs/explanation/retention.md): done jobs move to
    # jobs_history, partitioned by the time they finished, and leave it a partition at a
    # time.

    async def archive(self, *, after: float, partition: float, limit: int = 10_000) -> int:
        """Move done jobs that finished more than `after` seconds ago to jobs_history,
        in partitions `partition` seconds wide (docs/explanation/retention.md); returns
        how many moved (engine.archive)."""
        return await self.engine.archive(after=after, partition=partition, limit=limit)

    async def drop_history(self, *, retention: float) -> int:
        """Drop the partitions of jobs_history whose whole range ended more than
        `retention` seconds ago; returns how many went. A partition whose lock is not
        granted within history_lock_wait seconds is left for the next call."""
        return await self.engine.drop_history(retention=retention,
                                              lock_wait=self.history_lock_wait)

    async def history_partitions(self) -> list[HistoryPartition]:
        """The partitions of jobs_history, oldest first, with their bounds and sizes."""
        rows = await self._fetch("history_partitions_list")
        return [HistoryPartition(**row) for row in rows]

    async def vacuum(self, *, min_dead: int = 0, min_dead_share: float = 0.0) -> int:
        """VACUUM the jobs table once it holds at least `min_dead` dead row versions, and
        `min_dead_share` times its live ones; returns that count when it ran
        (engine.vacuum)."""
        return await self.engine.vacuum(min_dead=min_dead, min_dead_share=min_dead_share)

    async def age_priorities(self, *, limit: int = 10_000) -> int:
        """One aging pass (the leader runs it): how many jobs gained priority."""
        return await self.engine.age_priorities(limit=limit)

    async def reseal_args(self, ring: Keyring, *, batch_size: int = 500) -> ResealCounts:
        """Seal again with the first key of `ring` the args of every job still to run
        (pending, scheduled or waiting) that another key sealed, a page of batch_size
        at a time, each page one statement (`pgbaton rotate-keys`). A job claimed or
        changed meanwhile is left alone and counted; one whose key `ring` lacks is
        counted with its id, never changed. docs/howto/encryption.md."""
        check_int4("batch_size", batch_size, minimum=1)
        counts = ResealCounts()
        after = 0
        while True:
            page = await self._fetch("job_sealed_page", {
                "after": after, "kid": ring.current, "limit": batch_size})
            if not page:
                return counts
            after = page[-1]["id"]
            ids, old, new = [], [], []
            for row in page:
                try:
                    sealed = reseal(row["task"], row["args"], ring)
                except ArgsRejected:
                    counts.unopenable.append(row["id"])
                    continue
                if sealed is not None:
                    ids.append(row["id"])
                    old.append(json.dumps(row["args"]))
                    new.append(json.dumps(sealed))
            if ids:
                accepted = await self._changed_positions(
                    "job_args_reseal_many", {"ids": ids, "old": old, "new": new}, len(ids))
                counts.resealed += sum(accepted)
                counts.changed_meanwhile += len(ids) - sum(accepted)
