"""Check docs/explanation/model/claim.pml with spin: safety, liveness under weak
fairness, and the mutant without the token check, which must fail. `make model` runs
this module."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

MODEL = Path(__file__).resolve().parents[2] / "docs" / "explanation" / "model" / "claim.pml"
MUTANT_FLAG = "-DNO_TOKEN_CHECK"


@dataclass(frozen=True)
class Verdict:
    """What one run of the verifier said."""

    name: str
    errors: int
    output: str

    @property
    def summary(self) -> str:
        lines = [line.strip() for line in self.output.splitlines()]
        found = [line for line in lines if "violated" in line or "acceptance cycle" in line]
        stored = next((line for line in lines if "states, stored" in line), "")
        return f"{self.name}: errors {self.errors}; {stored}" + (
            f"; {found[0]}" if found else "")


def missing_tools() -> str | None:
    """Why the model cannot be checked here, or None when it can."""
    for tool, package in (("spin", "spin"), ("cc", "gcc")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install -y {package})"
    return None


def _verify(name: str, spin_flags: list[str], cc_flags: list[str],
            pan_flags: list[str]) -> Verdict:
    with tempfile.TemporaryDirectory(prefix="pgbaton-spin-") as folder:
        work = Path(folder)
        subprocess.run(["spin", *spin_flags, "-a", str(MODEL)], cwd=work, check=True,
                       capture_output=True, text=True)
        subprocess.run(["cc", "-w", "-O2", *cc_flags, "-o", "pan", "pan.c"], cwd=work,
                       check=True, capture_output=True, text=True)
        # pan exits 0 whether or not it found an error: its report says which.
        ran = subprocess.run(["./pan", *pan_flags], cwd=work, capture_output=True, text=True,
                             check=False)
    output = ran.stdout + ran.stderr
    counts = [line for line in output.splitlines() if "errors:" in line]
    if not counts:
        raise RuntimeError(f"{name}: spin's verifier gave no verdict:\n{output}")
    return Verdict(name, int(counts[-1].rsplit("errors:", 1)[1]), output)


def safety(*, mutant: bool = False) -> Verdict:
    """Assertions and the invariant monitor over every reachable state; no LTL claim."""
    return _verify("safety, no token check" if mutant else "safety",
                   [MUTANT_FLAG] if mutant else [], ["-DSAFETY", "-DNOCLAIM"],
                   ["-m100000"])


def liveness() -> Verdict:
    """The LTL claim done_or_failed, searched for acceptance cycles under weak fairness."""
    return _verify("liveness (weak fairness)", [], ["-DCOLLAPSE", "-DNFAIR=3"],
                   ["-a", "-f", "-m200000", "-N", "done_or_failed"])


def main() -> int:
    why = missing_tools()
    if why:
        print(f"cannot check the model: {why}", file=sys.stderr)
        return 2
    verdicts = [safety(), liveness(), safety(mutant=True)]
    for verdict in verdicts:
        print(verdict.summary)
    real_safety, real_liveness, mutant = verdicts
    if real_safety.errors or real_liveness.errors:
        print("FAIL: the model of the claim protocol has a counterexample", file=sys.stderr)
        return 1
    if not mutant.errors:
        print("FAIL: the mutant without the token check passed: the model proves nothing",
              file=sys.stderr)
        return 1
    print("ok: the model holds and the mutant without the token check fails, as it must")
    return 0


if __name__ == "__main__":
    sys.exit(main())
