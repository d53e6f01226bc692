"""`pgbaton doctor`: checks a live installation and shows the evidence for each finding.

Every check reads the catalogue, the statistics views or the jobs table, and the claim
is EXPLAINed, never executed: the doctor changes nothing (the copy of pgbaton's schema
it compares the live one with is built in a temporary schema and rolled back). Each
check gives a Finding (ok, warn or fail) with the lines it was judged on and what to do
about it; the exit status is 1 when any finding fails, so the command fits a monitoring
probe.

    findings.py    Finding, Thresholds and the words for durations and counts
    inspection.py  the doctor's session: named statements, EXPLAIN, the catalogues
    checks.py      the checks as data (CHECKS), and those of the schema and the jobs table
    plans.py       claim_plan: how the claim reads jobs
    sessions.py    idle_in_transaction, old_transactions
    statements.py  other sessions' SQL with every literal removed
    render.py      the report as a table; command.py the click command
"""

from __future__ import annotations

from .command import doctor

__all__ = ["doctor"]
