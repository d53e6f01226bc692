"""The claim_plan check: the claim must read jobs through its partial index.

The claim is EXPLAINed (never executed) as the planner chooses; when that plan does not
read the index, again with seq scans priced out, to tell "the index is missing or does
not fit" apart from "the table is small enough for a seq scan to be right".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import DictRow

from .findings import Finding, plural
from .inspection import Inspection

CLAIM_INDEX = "jobs_claimable"
# Below this many pages a seq scan of jobs costs less than walking an index, and the
# planner rightly prefers it; above it, a preferred seq scan means something is off.
SMALL_TABLE_PAGES = 128


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


@dataclass
class PlanVerdict:
    """What a JSON plan of job_claim_many says about how it reads jobs."""

    uses_index: bool
    sorts: bool
    problems: list[str]

    @property
    def good(self) -> bool:
        return self.uses_index and not self.problems


def judge_plan(plan: dict[str, Any]) -> PlanVerdict:
    """The candidate CTE (which picks the ids to claim) must read jobs
    through jobs_claimable, and no node may read the whole of jobs: on a big table either
    mistake makes every claim walk the done rows."""
    problems = []
    ctes = [n for n in _nodes(plan) if n.get("Subplan Name") == "CTE candidate"]
    cte_nodes = list(_nodes(ctes[0])) if ctes else []
    uses_index = any(n.get("Index Name") == CLAIM_INDEX for n in cte_nodes)
    # Only a sort above the index's scan undoes its order: the claim of named queues (an
    # arm of its own, which this plan of all queues does not run) merges theirs.
    sorts = any(n["Node Type"] in ("Sort", "Incremental Sort")
                and any(m.get("Index Name") == CLAIM_INDEX for m in _nodes(n))
                for n in cte_nodes)
    if not ctes:
        problems.append("no CTE candidate (is this the claim statement?)")
    elif not uses_index:
        problems.append(f"no scan of {CLAIM_INDEX} in the candidate CTE")
    for node in _nodes(plan):
        if node.get("Relation Name") == "jobs" and node["Node Type"] == "Seq Scan":
            problems.append(f"a Seq Scan on jobs (as {node.get('Alias', 'jobs')})")
    return PlanVerdict(uses_index, sorts, problems)


def _create_index_advice(inspection: Inspection) -> str:
    try:
        statement = inspection.index_create_statement(CLAIM_INDEX)
    except psycopg.Error:
        statement = None  # no TEMP privilege for the reference copy: point at the DDL
    if statement is None:
        statement = f"CREATE INDEX CONCURRENTLY {CLAIM_INDEX} ... (see `pgbaton schema --sql`)"
    return f"recreate the claim's partial index: {statement}"


def claim_plan(inspection: Inspection) -> Finding:
    schema = inspection.schema
    index = inspection.one("doctor_index_state", {"index": f'"{schema}".{CLAIM_INDEX}'})
    size = inspection.one("doctor_table_size", {"table": inspection.jobs_table})
    pages = int(size["pages"]) if size else 0
    evidence = []
    if index is None:
        evidence.append(f"index {CLAIM_INDEX}: does not exist in schema {schema!r}")
    else:
        state = "valid" if index["valid"] else "INVALID (a failed CREATE INDEX CONCURRENTLY?)"
        evidence.append(f"index {CLAIM_INDEX}: {state}, {index['bytes']} bytes: "
                        f"{index['definition']}")
    if size:
        evidence.append(f"table jobs: {plural(pages, 'page')}; planner's estimate "
                        f"{max(size['rows_estimated'], 0):.0f} rows")
    data: dict[str, Any] = {"index_exists": index is not None,
                            "index_valid": bool(index and index["valid"]),
                            "table_pages": pages}

    natural, natural_text = inspection.explain("doctor_plan_natural")
    verdict = judge_plan(natural)
    details = ["EXPLAIN job_claim_many (limit 10, all queues), as the planner chooses:"]
    details += ["  " + line for line in natural_text]
    data["natural_plan"] = {"uses_index": verdict.uses_index, "problems": verdict.problems}

    if index is not None and index["valid"] and verdict.good and not verdict.sorts:
        return Finding("claim_plan", "ok",
                       f"the claim reads jobs through {CLAIM_INDEX}, in claim order",
                       evidence, data=data, details=details)
    finding = _without_seqscan(inspection, index, pages, data, details)
    finding.evidence[:0] = evidence
    return finding


def _without_seqscan(
    inspection: Inspection, index: DictRow | None, pages: int, data: dict[str, Any],
    details: list[str],
) -> Finding:
    """The natural plan does not read the index: ask whether the claim can at all."""
    forced, forced_text = inspection.explain("doctor_plan_without_seqscan")
    forced_verdict = judge_plan(forced)
    details.append("EXPLAIN with enable_seqscan = off (can the claim use the index at all?):")
    details += ["  " + line for line in forced_text]
    data["plan_without_seqscan"] = {"uses_index": forced_verdict.uses_index,
                                    "problems": forced_verdict.problems}
    problems = "; ".join(forced_verdict.problems)
    if index is None:
        return Finding(
            "claim_plan", "fail",
            f"the index {CLAIM_INDEX} is missing: even with seq scans priced out, the "
            f"claim's plan has {problems}", [], _create_index_advice(inspection), data, details,
        )
    if not index["valid"]:
        return Finding(
            "claim_plan", "fail", f"the claim cannot use {CLAIM_INDEX}: the index is invalid",
            [], f"rebuild it: REINDEX INDEX CONCURRENTLY \"{inspection.schema}\".{CLAIM_INDEX}",
            data, details,
        )
    if not forced_verdict.good:
        return Finding(
            "claim_plan", "fail", f"even with seq scans priced out, the claim's plan has "
            f"{problems}", [],
            "see the schema_objects finding for what differs; "
            + _create_index_advice(inspection), data, details,
        )
    if forced_verdict.sorts:
        return Finding(
            "claim_plan", "warn",
            f"the claim reads {CLAIM_INDEX} but sorts what it reads: the index's order "
            "does not match the claim's", [],
            _create_index_advice(inspection) + " (after dropping the one that differs)",
            data, details,
        )
    if pages < SMALL_TABLE_PAGES:
        return Finding(
            "claim_plan", "ok",
            f"the claim can read jobs through {CLAIM_INDEX}; on a table this small "
            f"({plural(pages, 'page')}) the planner rightly prefers a seq scan",
            [], data=data, details=details,
        )
    return Finding(
        "claim_plan", "warn",
        f"the planner prefers a seq scan of a {pages}-page jobs table over {CLAIM_INDEX}", [],
        f"refresh the statistics: ANALYZE \"{inspection.schema}\".jobs; if the plan stays, "
        "check random_page_cost and effective_cache_size", data, details,
    )
