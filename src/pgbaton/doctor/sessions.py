"""The checks of other sessions: idle in transaction, and old transactions, prepared
transactions or replication slots that hold back vacuum. Their statements are shown
only with every literal removed (statements.py)."""

from __future__ import annotations

from psycopg.rows import DictRow

from .findings import MAX_LISTED, Finding, age, plural
from .inspection import Inspection
from .statements import without_literals


def idle_in_transaction(inspection: Inspection) -> Finding:
    limit = inspection.thresholds.max_idle_in_transaction
    rows = inspection.all("doctor_idle_in_transaction")
    hidden_row = inspection.one("doctor_hidden_sessions")
    hidden = int(hidden_row["hidden"]) if hidden_row else 0
    over = [r for r in rows if r["idle_seconds"] > limit]
    evidence = [_idle_line(r) for r in rows[:MAX_LISTED]]
    if len(rows) > MAX_LISTED:
        evidence.append(f"... and {len(rows) - MAX_LISTED} more")
    if hidden:
        evidence.append(f"{plural(hidden, 'session')} of other roles cannot be seen by "
                        f"{inspection.server.get('user')!r}")
    data = {"max_idle_seconds": limit, "hidden_sessions": hidden,
            "sessions": [{"pid": r["pid"], "application_name": r["application_name"],
                          "state": r["state"], "idle_seconds": r["idle_seconds"],
                          "transaction_seconds": r["transaction_seconds"],
                          "over_limit": r["idle_seconds"] > limit} for r in rows]}
    if over:
        pids = ", ".join(str(r["pid"]) for r in over)
        return Finding(
            "idle_in_transaction", "fail",
            f"{plural(len(over), 'session')} idle in transaction for longer than "
            f"{age(limit)} (pid {pids})", evidence,
            "these sessions hold their locks and keep a transaction open: fix the code "
            "that waits between BEGIN and COMMIT, end them now with SELECT "
            "pg_terminate_backend(pid), and set idle_in_transaction_session_timeout so "
            "the server ends such sessions itself", data,
        )
    if hidden:
        return Finding(
            "idle_in_transaction", "warn",
            f"no visible session is idle in transaction for longer than {age(limit)}, but "
            f"{plural(hidden, 'session')} cannot be seen", evidence,
            f"grant pg_monitor (or pg_read_all_stats) to {inspection.server.get('user')!r} so "
            "the doctor can see every session", data,
        )
    return Finding("idle_in_transaction", "ok",
                   f"no session is idle in transaction for longer than {age(limit)}",
                   evidence, data=data)

def _idle_line(row: DictRow) -> str:
    line = (f"pid {row['pid']} {row['user']}@{row['client_addr'] or 'local'} "
            f"application {row['application_name']!r}: {row['state']} for "
            f"{age(row['idle_seconds'])}, transaction open {age(row['transaction_seconds'])}")
    if row["has_written"]:
        line += ", has written"
    if row["xmin_age"] is not None:
        line += f", holds a snapshot {row['xmin_age']} xids old"
    return line + f"; last statement: {without_literals(row['last_query'])}"

def old_transactions(inspection: Inspection) -> Finding:
    limit = inspection.thresholds.max_transaction_age
    sessions = inspection.all("doctor_old_snapshots")
    prepared = inspection.all("doctor_prepared_transactions")
    slots = inspection.all("doctor_replication_slots")
    old_sessions = [r for r in sessions if r["transaction_seconds"] > limit]
    old_prepared = [r for r in prepared if r["prepared_seconds"] > limit]
    idle_slots = [r for r in slots if not r["active"]]
    evidence = [
        f"pid {r['pid']} {r['user']}@{r['client_addr'] or 'local'} ({r['backend_type']}, "
        f"application {r['application_name']!r}, {r['state']}): transaction open "
        f"{age(r['transaction_seconds'])}"
        + (f", snapshot {r['xmin_age']} xids old" if r["xmin_age"] is not None else "")
        + (f", wrote {r['xid_age']} xids ago" if r["xid_age"] is not None else "")
        + f"; last statement: {without_literals(r['last_query'])}"
        for r in (old_sessions or sessions[:1])
    ][:MAX_LISTED]
    evidence += [f"prepared transaction {r['gid']!r} of {r['owner']}: prepared "
                 f"{age(r['prepared_seconds'])} ago, {r['xid_age']} xids old"
                 for r in prepared[:MAX_LISTED]]
    evidence += [f"replication slot {r['slot_name']} ({r['slot_type']}, "
                 f"{'active' if r['active'] else 'inactive'}) holds xmin "
                 f"{r['xmin_age']} xids old" for r in slots[:MAX_LISTED]]
    if sessions and not old_sessions:
        evidence[0] = "oldest snapshot: " + evidence[0]
    data = {"max_transaction_seconds": limit,
            "sessions": [{"pid": r["pid"], "user": r["user"],
                          "client_addr": r["client_addr"],
                          "application_name": r["application_name"], "state": r["state"],
                          "transaction_seconds": r["transaction_seconds"],
                          "xmin_age": r["xmin_age"],
                          "last_query": without_literals(r["last_query"])}
                         for r in old_sessions],
            "prepared": [r["gid"] for r in old_prepared],
            "inactive_slots": [r["slot_name"] for r in idle_slots]}
    if old_sessions or old_prepared:
        holders = [f"pid {r['pid']}" for r in old_sessions]
        holders += [f"prepared {r['gid']!r}" for r in old_prepared]
        return Finding(
            "old_transactions", "fail",
            f"{plural(len(holders), 'transaction')} older than {age(limit)} "
            f"{'holds' if len(holders) == 1 else 'hold'} back vacuum "
            f"({', '.join(holders)})", evidence,
            "while they are open VACUUM cannot remove the dead job rows that every claim "
            "and completion leaves, and claims slow down as they pile up at the head of "
            "the claim's index: commit or end them (SELECT pg_terminate_backend(pid); "
            "COMMIT PREPARED or ROLLBACK PREPARED 'gid'), and keep transactions short "
            "(docs/explanation/scaling.md, \"A held xmin\")",
            data,
        )
    if idle_slots:
        return Finding(
            "old_transactions", "warn",
            "an inactive replication slot holds back vacuum: "
            + ", ".join(r["slot_name"] for r in idle_slots), evidence,
            "reconnect its consumer, or drop the slot if nothing uses it: SELECT "
            "pg_drop_replication_slot('name')", data,
        )
    if not evidence:
        evidence = ["no open transaction holds a snapshot or a transaction id"]
    return Finding("old_transactions", "ok",
                   f"no transaction older than {age(limit)} holds back vacuum",
                   evidence, data=data)
