"""The exceptions pgbaton raises, one tree under PgbatonError.

    PgbatonError
     +-- ConfigurationError          no DSN, a bad schema name
     +-- InvalidArgument (ValueError) a value pgbaton cannot accept; nothing was written
     |    +-- NotSerializable (TypeError too)  args or a result that JSON cannot hold
     |    +-- IdempotencyKeyTaken    the key belongs to a job of another task
     |    +-- ScheduleChanged        a schedule changed since the caller read it
     +-- UniqueJobUnseen             a unique enqueue met a job it could not read
     +-- ConnectionFailed            the server cannot be reached, or went away mid-call
     +-- ServerTooOld                PostgreSQL older than 13 (no built-in gen_random_uuid)
     +-- SchemaError                 the schema does not match this version of pgbaton
     |    +-- SchemaNotMigrated      no pgbaton tables in the schema yet
     |    +-- SchemaOutOfDate        the schema is older than the library
     |    +-- SchemaTooNew           the schema is newer than the library
     +-- UnknownTask                 a job names a task this worker's App does not have
     +-- ArgsRejected                a claimed job's stored args do not fit its task, or
     |                               cannot be decrypted: failed at once, not retried
     +-- JobTimeout                  a handler ran past its task's timeout
     +-- JobEnded                    a waited-for job ended without a result (App.wait)
     |    +-- JobFailed              it failed, its last attempt spent; with its errors
     |    +-- JobCancelled           it was cancelled
     +-- JobNotFound (LookupError)   App.wait: no job of that id, in jobs or the history
     +-- HandlerOutcome              raised by a handler (pgbaton.outcomes): Snooze,
     |                               Cancel, Discard
     +-- SnoozeLimit                 a job snoozed past its task's max_snoozes

HandlerOutcome and SnoozeLimit live in pgbaton.outcomes (they check their values with
the argument checks, which need this module first).
     +-- StepMismatch                a job's stored steps do not match what its code reaches
     +-- StepNotStored               a step's result was not stored: the claim was lost

A lost claim is not an exception: complete(), fail(), heartbeat() and release() return
False for it, because losing a job to an expired lease is part of normal operation.
"""

from __future__ import annotations

from typing import Any


class PgbatonError(Exception):
    """Base class of every error pgbaton raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle (a process pool's App.wait, a multiprocessing log handler) rebuilds an
        # exception by calling its class with its args, the message alone: an __init__
        # that takes other arguments (JobEnded's job_id, task, errors) then fails, or
        # checks the message as a value (Snooze's seconds). Rebuilt without __init__,
        # from the message, and the attributes as they were given back as its state
        # (after the object exists, so an attribute that refers back to it comes back).
        return (_rebuilt, (type(self), self.args), vars(self))


def _rebuilt(cls: type[PgbatonError], args: tuple[Any, ...]) -> PgbatonError:
    error = cls.__new__(cls, *args)
    error.args = args
    return error


class ConfigurationError(PgbatonError):
    """pgbaton was not told enough to start: no DSN, or a schema name it cannot use."""


class ArgsRejected(PgbatonError):
    """A claimed job's stored args that its handler cannot be given: they do not fit the
    handler's types (a job enqueued through the SQL API), or they are encrypted with a
    key this worker does not hold. Trying again would meet the same args, so the job
    fails at once, its remaining attempts unspent (docs/howto/typed-args.md,
    docs/howto/encryption.md)."""


class InvalidArgument(PgbatonError, ValueError):
    """An argument pgbaton cannot accept. Raised before anything is written."""


class NotSerializable(InvalidArgument, TypeError):
    """Job arguments or a result that cannot be stored as JSON."""


class IdempotencyKeyTaken(InvalidArgument):
    """An idempotency key already used by a job of another task, refused while the schema
    keeps the previous release's global index (docs/explanation/guarantees.md). Nothing was
    written."""


class ScheduleChanged(InvalidArgument):
    """A change of a schedule made against a revision that is no longer the row's: it
    was changed (by another operator, say) since the caller read it. Nothing was
    written; read it again and redo the change (docs/explanation/schedules.md)."""


class UniqueJobUnseen(PgbatonError):
    """A unique enqueue kept meeting a job of its key that its transaction could not
    read (docs/howto/unique.md). Nothing was written."""


class ConnectionFailed(PgbatonError):
    """The PostgreSQL server could not be reached or closed the connection. `written`:
    False when pgbaton made sure that nothing of the call was written, so a retry is
    safe (enqueue_many's batches by COPY on its own connections); None when it does not
    know (docs/explanation/reliability.md, "An enqueue whose commit is unknown")."""

    written: bool | None = None


class ServerTooOld(PgbatonError):
    """The server is older than PostgreSQL 13, which pgbaton needs."""


class SchemaError(PgbatonError):
    """The database schema and this pgbaton disagree."""


class SchemaNotMigrated(SchemaError):
    """The schema holds no pgbaton tables: run `pgbaton migrate`."""


class SchemaOutOfDate(SchemaError):
    """The schema is older than this pgbaton: run `pgbaton migrate`."""


class SchemaTooNew(SchemaError):
    """The schema was migrated by a newer pgbaton: upgrade this one."""


class UnknownTask(PgbatonError):
    """A job names a task that the worker's App does not register."""


class JobTimeout(PgbatonError):
    """A handler ran longer than its task's timeout; the attempt fails with this."""


class JobEnded(PgbatonError):
    """A waited-for job ended without a result: `job_id`, `task`, `errors`, the job's
    list of its errors (each a dict: type, message, attempt, ...), and `attempts`, the
    attempts it spent. They differ: a snooze limit or a death before a start leaves a
    record without spending an attempt."""

    outcome = "ended"

    def __init__(self, job_id: int, task: str, errors: list[dict[str, Any]],
                 attempts: int | None = None) -> None:
        self.job_id, self.task, self.errors = job_id, task, errors
        self.attempts = len(errors) if attempts is None else attempts
        last = errors[-1] if errors else {}
        said = f": {last.get('type', 'Error')}: {last.get('message', '')}" if last else ""
        tries = (f" after {self.attempts} attempt{'s' if self.attempts != 1 else ''}"
                 if self.outcome == "failed" and self.attempts else "")
        super().__init__(f"job {job_id} (task {task!r}) {self.outcome}{tries}{said}")


class JobFailed(JobEnded):
    """App.wait's job failed: it spent its last attempt (its `errors` say how)."""

    outcome = "failed"


class JobCancelled(JobEnded):
    """App.wait's job was cancelled (by an operator, or as the child of a failed job)."""

    outcome = "was cancelled"


class JobNotFound(PgbatonError, LookupError):
    """App.wait's job is neither in the jobs table nor in the history: it never existed
    or was deleted (pruned, or by an operator)."""


class StepMismatch(PgbatonError):
    """A run of a job with durable steps reached a step, sleep or wait other than the one
    stored at that place, or ended without reaching steps an earlier run stored: the
    code changed between its runs (docs/howto/durable-steps.md). Nothing is replayed."""


class StepNotStored(PgbatonError):
    """A step's function returned but its result could not be stored: the job's claim is
    lost (cancelled, or taken after its lease). The handler should stop."""

