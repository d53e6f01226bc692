"""Every limit pgbaton puts on what it is given, in one place
(docs/explanation/guarantees.md lists them with their reasons). The checks in
_checks.py, _encoding.py and _sql.py read them from here; a value past a limit is
refused with a one-line InvalidArgument before anything is written. The SQL API's checks
(job_enqueue_check in sql/schema.sql) repeat the enqueue limits as literals;
tests/sql/test_sql_api.py passes each at and past its value here.
"""

from __future__ import annotations

import datetime as dt

# Task, queue and worker names. A queue name is the payload of the wake-up NOTIFY (at
# most 8,000 bytes) and a task name shares an index entry with the idempotency key, so
# names stay short; 255 bytes is far more than a dotted Python path needs.
MAX_NAME_BYTES = 255

# `key` and `idempotency_key` live in B-tree indexes, whose entries PostgreSQL caps at
# about 2,700 bytes (a third of an 8 kB page). 2,048 bytes of key leaves room for the
# task name and the row's other index columns, so an over-long key is refused by
# pgbaton with a clear message instead of by the index with an error about page sizes.
MAX_KEY_BYTES = 2048

# One job's args (and one job's result) as JSON text. PostgreSQL's jsonb holds at most
# 256 MB; a job's arguments that large belong in a table the job reads, not in the queue.
MAX_ARGS_BYTES = 16 * 1024 * 1024

# One enqueue_many() call travels as one JSON document, a single statement parameter,
# which jsonb must hold: below its 256 MB ceiling with room to spare.
MAX_BATCH_BYTES = 200 * 1024 * 1024

# JSON nesting, in args and results. Python's decoder recurses once per level and fails
# near its recursion limit (about 1,000, less the stack already in use), so a job nested
# that deep could be stored by a producer and then break every claim that fetches it.
# 200 levels leave a wide margin and are far beyond any sensible argument.
MAX_JSON_DEPTH = 200

# One job's parents (after=): each is a row of job_dependencies and a row the enqueue
# locks; a job waiting for more than this many is a batch's work, not a dependency list.
MAX_PARENTS = 1000

# Durations (delay, lease, retry_in, retention, a shutdown grace) and how far ahead
# run_at may lie: ten years. Beyond that it is a mistake, not a plan.
MAX_SECONDS = 10 * 365.25 * 24 * 3600

# run_at may not lie before the Unix epoch: a job dated in year 1 would jump ahead of
# every job in its priority, which is never what the caller meant.
EARLIEST_RUN_AT = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

# A unique job's window (Unique(period=)): at least a millisecond, at most MAX_SECONDS;
# windows are numbered from the epoch, so a shorter one would only count microseconds.
MIN_UNIQUE_PERIOD_SECONDS = 0.001

# The width of a jobs_history partition (the history retention mode,
# docs/explanation/retention.md): whole minutes, so that a partition's name (its start,
# to the minute) is unique, and at most a month. Every look-up of a job by id that
# misses jobs probes each partition, so retention / width (the number of partitions
# kept) should stay in the tens or hundreds.
MIN_HISTORY_PARTITION_SECONDS = 60
MAX_HISTORY_PARTITION_SECONDS = 31 * 24 * 3600

# priority, max_attempts and limit are PostgreSQL integers; job ids (and a bulk
# action's `upto`) are bigints.
INT4_MIN, INT4_MAX = -(2**31), 2**31 - 1
INT8_MAX = 2**63 - 1

# Schema names go into SQL text, quoted: plain lower-case identifiers only, short enough
# that its NOTIFY channels (the longest `<schema>_cancelled`) stay within PostgreSQL's
# 63-byte names, and
# not starting with `pg_`, which PostgreSQL reserves for its own schemas.
MAX_SCHEMA_NAME_LENGTH = 51
RESERVED_SCHEMA_PREFIX = "pg_"

# Flow control (docs/explanation/flow_control.md). A rate limit's window is a log of its
# starts, counted by every claim of the queue, so one window holds at most
# MAX_RATE_LIMIT starts (express more as a shorter window: 100,000/min is about
# 1,667/s), and spans between a millisecond and a week. A concurrency limit is counted
# up to itself.
MAX_RATE_LIMIT = 10_000
MIN_RATE_PERIOD_SECONDS = 0.001
MAX_RATE_PERIOD_SECONDS = 7 * 24 * 3600.0
MAX_CONCURRENCY = 100_000
# Aging (queue_set_aging): a pass at most once a second; at least as often as a week.
MIN_AGING_SECONDS = 1.0

# An operator's job filter (pgbaton.JobFilter): each text field is an equality or a
# substring test on every row the statement reads, and nobody types more than this.
MAX_FILTER_TEXT = 200

# Numbers typed by a person (_checks.parse_whole): more digits than any limit here
# needs, refused before int() spends time on them (it refuses past 4,300 itself).
MAX_TYPED_DIGITS = 30

# The dashboard (pgbaton.web): a page of the job list holds at most this many jobs, and
# a request body larger than any of its forms by far is refused unread.
MAX_DASHBOARD_PAGE = 500
MAX_DASHBOARD_BODY = 64 * 1024

# A handler's outcome (pgbaton.Snooze's note, Cancel's and Discard's reason): kept in the
# job's errors and carried by its event; a sentence or a paragraph, not a document.
MAX_OUTCOME_TEXT = 4000

# A task's max_snoozes default (docs/howto/retries.md): a snooze gives its attempt back,
# so this is what ends a job that only ever snoozes. A job polling once a minute for
# something that is not coming then ends after about 16 hours (1,000 minutes), long
# enough for any outage a snooze is meant to wait out, short enough to be noticed.
DEFAULT_MAX_SNOOZES = 1000
# Progress and each job's own log lines (docs/howto/progress-and-logs.md). A progress
# note is a status line for a person, shown in lists: 200 characters. The lines a
# handler logs are kept per attempt up to a count and a size of message text, each line
# cut at a length, so that a handler logging in a loop cannot fill the database: the
# rest is counted, and every reader marks how many lines were dropped.
MAX_PROGRESS_NOTE_CHARS = 200
MAX_JOB_LOG_LINES = 200
MAX_JOB_LOG_BYTES = 64 * 1024
MAX_JOB_LOG_LINE_CHARS = 4000

# Durable steps (docs/howto/durable-steps.md). A step's result is read back by every
# later run of its job, so it is held to a job's own bound; an event's payload travels
# through send_event, from SQL as well (its function says the same number). A sleep
# wakes by the end of year 9999 at the latest; a wait without timeout is due then.
MAX_STEP_RESULT_BYTES = MAX_ARGS_BYTES
MAX_EVENT_PAYLOAD_BYTES = 1024 * 1024
LATEST_WAKE = dt.datetime(9999, 12, 31, tzinfo=dt.UTC)
