"""Jobs that wait for other jobs, and batches: the checks and the plan of one enqueue
(docs/explanation/dependencies.md). No I/O: AsyncQueue runs the plan's statements.

A job's `after` lists its parents: ids of jobs already written, or the `label` of
another job of the same enqueue_many call. Labels are how a call names its own jobs,
so cycles can arise only among them; graphlib finds them.
"""

from __future__ import annotations

import datetime as dt
import graphlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._checks import JOB_DEFAULTS, _brief, check_job_id, check_name, job_params
from ._encoding import to_json
from .errors import InvalidArgument
from .limits import MAX_PARENTS

AFTER_FAILURE = ("cancel", "run")
GRAPH_FIELDS = frozenset({"after", "label", "after_failure"})
ENDED = ("failed", "cancelled")  # a parent that ended so holds a child back
CALLBACK_ARG = "batch"  # the argument a batch callback receives its batch in


@dataclass(frozen=True, slots=True)
class Callback:
    """A job a batch enqueues when its last job ends. Its args get one more, `batch`:
    {"id", "jobs", "done", "failed", "cancelled"}. queue and max_attempts left None are
    the task's own when an App enqueues the batch, else "default" and 5."""

    task: str
    args: Mapping[str, Any] | None = None
    queue: str | None = None
    priority: int = 0
    max_attempts: int | None = None

    def job_options(self) -> dict[str, Any]:
        """The callback job's queue, priority and max_attempts, the defaults filled in."""
        return {
            "queue": JOB_DEFAULTS["queue"] if self.queue is None else self.queue,
            "priority": self.priority,
            "max_attempts": (JOB_DEFAULTS["max_attempts"] if self.max_attempts is None
                             else self.max_attempts),
        }

    def as_json(self, which: str) -> str:
        params = job_params(
            self.task, self.args, **self.job_options(), encode_args=False,
        )
        if CALLBACK_ARG in params["args"]:
            raise InvalidArgument(
                f"{which} callback {self.task!r}: its args cannot contain {CALLBACK_ARG!r}, "
                "which the batch fills in"
            )
        fields = ("task", "args", "queue", "priority", "max_attempts")
        return to_json(
            {name: params[name] for name in fields}, f"args of the {which} callback {self.task!r}"
        )


@dataclass(frozen=True, slots=True)
class Batch:
    """enqueue_many(..., batch=Batch(...)): the jobs form a batch; on_finish is enqueued
    once when the last of them ends, on_success only if every one ended done."""

    on_finish: Callback | None = None
    on_success: Callback | None = None

    def params(self, jobs: int) -> dict[str, Any]:
        for which in ("on_finish", "on_success"):
            callback = getattr(self, which)
            if callback is not None and not isinstance(callback, Callback):
                raise InvalidArgument(
                    f"batch {which} must be a pgbaton.Callback or None, got {_brief(callback)}"
                )
        if jobs == 0:
            raise InvalidArgument("a batch needs at least one job; nothing was written")
        return {
            "jobs": jobs,
            "on_finish": self.on_finish and self.on_finish.as_json("on_finish"),
            "on_success": self.on_success and self.on_success.as_json("on_success"),
        }


@dataclass(frozen=True, slots=True)
class Dependency:
    """A parent or a child of a job, as Queue.dependencies() lists them."""

    relation: str  # "parent" or "child"
    id: int
    task: str
    status: str
    run_after_failure: bool


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """A batch as stored: how many of its jobs have not ended, and how the others did."""

    id: int
    jobs: int
    jobs_left: int
    done: int
    failed: int
    cancelled: int
    on_finish: dict[str, Any] | None
    on_success: dict[str, Any] | None
    created_at: dt.datetime
    finished_at: dt.datetime | None  # when the last job ended and the callbacks went in

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> BatchInfo:
        return cls(**row)


@dataclass
class Plan:
    """What one enqueue with parents or a batch writes, before the parents are read."""

    jobs: list[Mapping[str, Any]]  # each without after/label/after_failure
    parents: list[list[int | str]]  # per job: ids and labels, repeats dropped
    run_after_failure: list[bool]
    positions: dict[str, int]  # label -> position
    external: list[int] = field(default_factory=list)  # every parent id, sorted

    def statement_params(
        self, statuses: Mapping[int, tuple[str, str]], schema: str
    ) -> dict[str, Any]:
        """The parameters of job_insert_graph, given each external parent's (task,
        status) as locked. Raises for a parent that does not exist."""
        missing = [job_id for job_id in self.external if job_id not in statuses]
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
            raise InvalidArgument(
                f"after: no job {shown} in schema {schema!r}; nothing was written"
            )
        waiting_for: list[int | None] = []
        has_dependents = [False] * len(self.jobs)
        edges: list[dict[str, Any]] = []
        for position, parents in enumerate(self.parents, start=1):
            unfinished = 0
            for parent in parents:
                edge: dict[str, Any] = {
                    "child": position, "run_after_failure": self.run_after_failure[position - 1]
                }
                if isinstance(parent, str):
                    edge["parent"] = self.positions[parent] + 1
                    has_dependents[self.positions[parent]] = True
                    unfinished += 1
                else:
                    edge["parent_id"] = parent
                    # An ended parent counts as unfinished here; job_parents_replay then
                    # applies its end as the trigger would have.
                    unfinished += statuses[parent][1] != "done"
                edges.append(edge)
            waiting_for.append(unfinished if parents else None)
        return {
            "waiting_for": waiting_for,
            "has_dependents": has_dependents,
            "edges": to_json(edges, "the jobs' dependencies"),
            # Ids are drawn in this order, so a job's id is above its parents' even when
            # the call lists it first: per-key order may then hold a key for an older
            # waiting job without ever holding back that job's own parent.
            "order": [position + 1 for position in self.order()],
        }

    def order(self) -> list[int]:
        """Positions with every job after the jobs of the call it waits for."""
        sorter: graphlib.TopologicalSorter[int] = graphlib.TopologicalSorter()
        for position, parents in enumerate(self.parents):
            sorter.add(position, *(self.positions[p] for p in parents if isinstance(p, str)))
        return list(sorter.static_order())

    def ended_parents(self, statuses: Mapping[int, tuple[str, str]]) -> list[int]:
        return [job_id for job_id in self.external if statuses[job_id][1] in ENDED]


def check_after(where: str, after: object, *, labels: bool = True) -> list[int | str]:
    """A job's parents: None or a list of job ids (and labels, in enqueue_many)."""
    if after is None:
        return []
    if isinstance(after, str | bytes | Mapping) or not isinstance(after, Iterable):
        raise InvalidArgument(f"{where}after must be a list of job ids, got {_brief(after)}")
    parents: dict[int | str, None] = {}
    for parent in after:
        if isinstance(parent, str) and labels:
            parents[check_name(f"{where}after label", parent)] = None
        else:
            try:
                parents[check_job_id(parent)] = None
            except InvalidArgument:
                what = " or labels of jobs of the same call" if labels else ""
                raise InvalidArgument(
                    f"{where}after must hold job ids (positive whole numbers){what}, "
                    f"got {_brief(parent)}"
                ) from None
        if len(parents) > MAX_PARENTS:
            raise InvalidArgument(
                f"{where}after lists more than {MAX_PARENTS:,} jobs, pgbaton's limit for one "
                "job's parents"
            )
    return list(parents)


def check_after_failure(where: str, value: object) -> bool:
    """True: run after a parent that failed or was cancelled; False: be cancelled."""
    if value not in AFTER_FAILURE:
        raise InvalidArgument(
            f"{where}after_failure must be one of {', '.join(map(repr, AFTER_FAILURE))}, "
            f"got {_brief(value)}"
        )
    return value == "run"


def plan(jobs: Iterable[Mapping[str, Any]]) -> Plan:
    """Check the jobs' graph fields (labels, parents, cycles) and split them off."""
    plain: list[Mapping[str, Any]] = []
    parents: list[list[int | str]] = []
    run_after_failure: list[bool] = []
    positions: dict[str, int] = {}
    for position, job in enumerate(jobs):
        if not isinstance(job, Mapping):
            raise InvalidArgument(f"job {position} must be a mapping with a 'task'")
        where = f"job {position}: "
        label = job.get("label")
        if label is not None:
            check_name(f"{where}label", label)
            if label in positions:
                raise InvalidArgument(
                    f"{where}label {label!r} is already the label of job {positions[label]}"
                )
            positions[label] = position
        parents.append(check_after(where, job.get("after")))
        run_after_failure.append(check_after_failure(where, job.get("after_failure", "cancel")))
        if job.get("idempotency_key") is not None:
            raise InvalidArgument(
                f"{where}idempotency_key cannot be combined with after= or batch= (an "
                "existing job cannot be made to wait or join a batch); nothing was written"
            )
        plain.append({name: value for name, value in job.items() if name not in GRAPH_FIELDS})
    sorter: graphlib.TopologicalSorter[int] = graphlib.TopologicalSorter()
    external: set[int] = set()
    for position, listed in enumerate(parents):
        sorter.add(position)
        for parent in listed:
            if isinstance(parent, int):
                external.add(parent)
            elif parent not in positions:
                raise InvalidArgument(
                    f"job {position}: after names label {parent!r}, which no job of this "
                    "call carries; nothing was written"
                )
            else:
                sorter.add(position, positions[parent])
    try:
        sorter.prepare()
    except graphlib.CycleError as error:
        cycle = " -> ".join(f"job {p}" for p in error.args[1])
        raise InvalidArgument(
            f"the jobs wait for each other in a cycle ({cycle}); nothing was written"
        ) from None
    return Plan(plain, parents, run_after_failure, positions, sorted(external))


def check_batch(batch: object) -> Batch | None:
    if batch is not None and not isinstance(batch, Batch):
        raise InvalidArgument(f"batch must be a pgbaton.Batch or None, got {_brief(batch)}")
    return batch


def needs_plan(jobs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any job uses a graph field (the plain enqueue_many path is cheaper)."""
    return any(
        isinstance(job, Mapping) and not GRAPH_FIELDS.isdisjoint(job) for job in jobs
    )

