"""The operator actions, one table: what each is called, the states it acts on, what
it says when it leaves a job alone, whether it wakes a queue, and its statements.

The Python API (AsyncQueue.act and act_matching, and the named methods over them),
`pgbaton retry` / `pgbaton cancel` and the dashboard read this table; nothing else
lists the actions. `statuses` is what each statement's guard in sql/ allows (those
guards stay literal SQL, the design's record: tests/web/test_action_table.py proves
that the statement, the API and the dashboard accept exactly the jobs in these
states and refuse the rest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import InvalidArgument

if TYPE_CHECKING:
    from .models import Job


@dataclass(frozen=True, slots=True)
class Action:
    """One operator action. `one` takes `id` and returns a row per job changed;
    `matching` takes the filter's parameters and `upto`. An action that wakes makes
    jobs due now: its statements take a `channel` and NOTIFY the queues of the jobs
    they changed, and its `matching` returns one row (changed, queues) instead."""

    name: str  # the API's name: queue.act(name, ...), queue.<name>(job_id)
    word: str  # the dashboard's URL word (/jobs/<id>/<word>) and the command line's
    label: str  # the dashboard's button
    statuses: tuple[str, ...]  # the states a job may leave by it (the guards in SQL)
    refusal: str  # why a job that exists was left alone
    notice: str  # what the dashboard says once one job was changed
    done: str  # "3 jobs <done>"
    wakes: bool
    one: str  # the statement for one job
    matching: str  # the statement for every job of a filter
    # The statement tried when `one` changed nothing (delete: a done job moved to
    # jobs_history, docs/explanation/retention.md).
    one_else: str | None = None
    takes_priority: bool = False
    event: str | None = None  # emitted (pgbaton.events) when `one` changed the job
    question: str = ""  # the dashboard's confirmation; {id} is the job's
    # The bulk confirmation; {jobs} is "3 jobs" (or "1 job").
    question_many: str = ""

    def ask(self, job_id: int) -> str:
        return self.question.format(id=job_id)

    def ask_many(self, count: int) -> str:
        """"Retry 3 jobs with fresh attempts?", not "retry on 3 jobs?"."""
        return self.question_many.format(jobs=f"{count} job{'' if count == 1 else 's'}")


ACTIONS: tuple[Action, ...] = (
    Action(
        name="retry", word="retry", label="Retry", statuses=("failed", "cancelled"),
        refusal="only a failed or cancelled job can be retried",
        notice="The job is pending again.", done="retried", wakes=True,
        one="job_retry", matching="job_retry_matching",
        question="Retry job {id} with fresh attempts?",
        question_many="Retry {jobs} with fresh attempts?",
    ),
    Action(
        name="cancel", word="cancel", label="Cancel",
        statuses=("pending", "running", "waiting"),
        refusal="only a pending, running or waiting job can be cancelled",
        notice="The job was cancelled.", done="cancelled", wakes=False,
        one="job_cancel", matching="job_cancel_matching", event="job.cancelled",
        question="Cancel job {id}?",
        question_many="Cancel {jobs}?",
    ),
    Action(
        # Pending and scheduled later, and not held by a cancelled handler's lease:
        # the guard's conditions beyond the state, which the refusal says.
        name="run_now", word="run-now", label="Run now", statuses=("pending",),
        refusal="only a pending job scheduled for later can be run now",
        notice="The job is due now.", done="made due now", wakes=True,
        one="job_run_now", matching="job_run_now_matching",
        question="Make job {id} due now?",
        question_many="Make {jobs} due now?",
    ),
    Action(
        name="set_priority", word="priority", label="Set priority", statuses=("pending",),
        refusal="only a pending job's priority can be changed",
        notice="The job's priority was changed.", done="given a new priority",
        wakes=False, one="job_set_priority", matching="job_set_priority_matching",
        takes_priority=True, question="Change the priority of job {id}?",
        question_many="Change the priority of {jobs}?",
    ),
    Action(
        # Not a job whose old handler may still run (a cancelled or retried job's
        # hold): the guard's condition beyond the state.
        name="delete", word="delete", label="Delete",
        statuses=("pending", "done", "failed", "cancelled", "waiting"),
        refusal="a running job cannot be deleted (cancel it first)",
        notice="The job was deleted.", done="deleted", wakes=False,
        one="job_delete", one_else="job_delete_archived", matching="job_delete_matching",
        question="Delete job {id} for good?",
        question_many="Delete {jobs} for good?",
    ),
)

BY_NAME = {action.name: action for action in ACTIONS}
BY_WORD = {action.word: action for action in ACTIONS}


def action_named(name: object) -> Action:
    """The action of an API name ("run_now"); InvalidArgument naming the others."""
    found = BY_NAME.get(name) if isinstance(name, str) else None
    if found is None:
        raise InvalidArgument(
            f"unknown action {name!r}: use one of {', '.join(BY_NAME)}"
        )
    return found


def action_of_word(word: str) -> Action:
    """The action of a dashboard or command-line word ("run-now"); InvalidArgument."""
    found = BY_WORD.get(word)
    if found is None:
        raise InvalidArgument(f"unknown action {word!r}: use one of {', '.join(BY_WORD)}")
    return found


def offered(status: str) -> list[Action]:
    """The actions a job in this state may take, in the table's order."""
    return [action for action in ACTIONS if status in action.statuses]


def refused(name: str, job_id: int, job: Job | None, schema: str) -> str:
    """Why the action left the job alone, read after the refusal: that there is no such
    job, or the state it is in and the states the action needs."""
    if job is None:
        return f"no job {job_id} in schema {schema!r}"
    return f"job {job_id} is {job.status}: {action_named(name).refusal}"
