"""pgbaton shown and measured: `pgbaton demo` (the crash-and-stall story, proven in SQL)
and `pgbaton lab` (five ways to claim a job, side by side).

Built on the library, never imported by it: the core must not grow a demo's needs.
"""
