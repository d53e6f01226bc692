"""pgbaton.testing: helpers for testing the code that enqueues jobs and the jobs' handlers.

    assert_enqueued / refute_enqueued   what is pending in the queue
    drain / drain_async                 run every due job through the real worker, now
    inline                              enqueue runs the job at once, no database
    job_context                         a JobContext for calling a handler directly
    WorkerThread / worker_task          a real worker beside the test
    wait_for_job / wait_for_job_async   until that worker has finished a job

The pytest plugin (pgbaton.testing.plugin, on with `pgbaton = true`) adds fixtures for a
migrated, empty schema. docs/howto/testing.md shows each helper with an example that runs as
a test.
"""

from .assertions import assert_enqueued, enqueued_jobs, refute_enqueued
from .context import TestJobContext, job_context
from .drain import DrainTimeout, drain, drain_async
from .inline import InlineJobs, inline
from .results import JobResult
from .waiting import wait_for_job, wait_for_job_async
from .workers import WorkerThread, worker_task

__all__ = [
    "DrainTimeout",
    "InlineJobs",
    "JobResult",
    "TestJobContext",
    "WorkerThread",
    "assert_enqueued",
    "drain",
    "drain_async",
    "enqueued_jobs",
    "inline",
    "job_context",
    "refute_enqueued",
    "wait_for_job",
    "wait_for_job_async",
    "worker_task",
]
