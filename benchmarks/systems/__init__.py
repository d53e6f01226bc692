"""The systems under test, by name. Each is imported only in the process that runs it, so
that a peer that is not installed costs nothing but its own cases."""

from __future__ import annotations

import importlib

from .base import System

# name -> (module, class). Order is the order of the report's columns.
SYSTEMS: dict[str, tuple[str, str]] = {
    "pgbaton": ("pgbaton_system", "PgbatonSystem"),
    "pgbaton_sub": ("pgbaton_system", "PgbatonSubscribedSystem"),
    "pgbaton_limit8": ("pgbaton_system", "PgbatonLimitedSystem"),
    "pgbaton_asyncio": ("pgbaton_system", "PgbatonOnAsyncio"),
    "pgbaton_b": ("pgbaton_system", "PgbatonClaimingAhead"),
    "pgbaton_auto": ("pgbaton_system", "PgbatonClaimingAheadAuto"),
    "pgbaton_p2": ("pgbaton_system", "PgbatonProcesses"),
    "pgbaton_p4": ("pgbaton_system", "PgbatonFourProcesses"),
    "pgbaton_b_p2": ("pgbaton_system", "PgbatonProcessesClaimingAhead"),
    "pgbaton_base": ("pgbaton_system", "PgbatonAtBase"),
    "pgbaton_base_b": ("pgbaton_system", "PgbatonAtBaseClaimingAhead"),
    "procrastinate": ("procrastinate_system", "ProcrastinateSystem"),
    "pgqueuer": ("pgqueuer_system", "PgqueuerSystem"),
    "chancy": ("chancy_system", "ChancySystem"),
    "awa": ("awa_system", "AwaSystem"),
    "graphile": ("graphile_system", "GraphileDefaults"),
    "graphile_b": ("graphile_system", "GraphileTuned"),
    "raw1": ("raw_system", "RawSQL1"),
    "raw100": ("raw_system", "RawSQL100"),
    "raw100n": ("raw_system", "RawSQLInFlight"),
    "rawpoll": ("raw_system", "RawSQLBusyPoll"),
}

# The systems that run pgbaton at the --base ref (benchmarks/base_tree.py): only with it.
AT_BASE = frozenset({"pgbaton_base", "pgbaton_base_b"})


def load(name: str) -> type[System]:
    module_name, class_name = SYSTEMS[name]
    module = importlib.import_module(f"{__name__}.{module_name}")
    system: type[System] = getattr(module, class_name)
    return system
