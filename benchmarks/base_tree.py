"""pgbaton at a base git ref, measured beside the checkout's in the same run.

`python -m benchmarks.run --base main` exports that commit's `src/` (`git archive`) into
a temporary folder; the base systems (`pgbaton_base`, `pgbaton_base_b`) run in processes
whose PYTHONPATH starts with that folder's `src/`, so they import the base's pgbaton
(pure Python) while the harness's own code is the checkout's. Each process checks where
its pgbaton came from (`verify_import`) and the run records it. The folder is removed when
the run ends, also when it is stopped by a signal (run.py turns SIGTERM and SIGINT into
SystemExit); a folder left by a killed run is removed by the next one.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import pid_alive

ROOT = Path(__file__).resolve().parents[1]
# Set by the harness in a base system's environment: the exported folder and its commit.
BASE_TREE_ENV = "PGBATON_BENCH_BASE_TREE"
BASE_COMMIT_ENV = "PGBATON_BENCH_BASE_COMMIT"
# The folder's name carries the harness's pid, so a later run removes only what a dead
# run left (as with the databases, common.DATABASE_PREFIX).
FOLDER_PREFIX = "pgbaton-bench-base-"


@dataclass(frozen=True)
class BaseTree:
    ref: str
    commit: str
    subject: str
    folder: Path

    @property
    def src(self) -> Path:
        return self.folder / "src"

    def env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a base system's process: the base's src/ first on
        PYTHONPATH (ahead of the venv's editable install of the checkout)."""
        environ = os.environ if environ is None else environ
        path = [str(self.src), *filter(None, [environ.get("PYTHONPATH")])]
        return {**environ, "PYTHONPATH": os.pathsep.join(path),
                BASE_TREE_ENV: str(self.folder), BASE_COMMIT_ENV: self.commit}

    def facts(self) -> dict[str, str]:
        return {"ref": self.ref, "commit": self.commit, "subject": self.subject}


def git(*args: str, repo: Path = ROOT) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise ValueError(done.stderr.strip() or f"git {' '.join(args)} failed")
    return done.stdout.strip()


def resolve(ref: str, repo: Path = ROOT) -> tuple[str, str]:
    """(full commit hash, subject line) of a ref; ValueError naming the ref if it is not
    a commit of the repository."""
    try:
        commit = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", repo=repo)
    except ValueError:
        commit = ""
    if not commit:
        raise ValueError(f"--base {ref!r} is not a commit of {repo}")
    return commit, git("log", "-1", "--format=%s", commit, repo=repo)


def checkout_facts(repo: Path = ROOT) -> dict[str, Any]:
    """The checkout's commit, and whether its src/ has changes not committed (the
    checkout's systems run them)."""
    try:
        commit = git("rev-parse", "HEAD", repo=repo)
        dirty = bool(git("status", "--porcelain", "src", repo=repo))
    except ValueError as error:
        return {"error": str(error)}
    return {"commit": commit, "subject": git("log", "-1", "--format=%s", repo=repo),
            "uncommitted_changes": dirty}


@contextmanager
def exported(ref: str, repo: Path = ROOT, parent: Path | None = None) -> Iterator[BaseTree]:
    """The ref's src/ in a temporary folder, removed on the way out (whatever the way)."""
    commit, subject = resolve(ref, repo)
    folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-", dir=parent))
    try:
        archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit,
                                  "src"], capture_output=True, check=False)
        if archive.returncode != 0:
            raise ValueError(f"git archive {commit} src: {archive.stderr.decode().strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(folder, filter="data")
        if not (folder / "src" / "pgbaton" / "__init__.py").exists():
            raise ValueError(f"--base {ref!r} ({commit[:10]}) has no src/pgbaton")
        yield BaseTree(ref, commit, subject, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def drop_leftover_trees(parent: Path | None = None) -> list[Path]:
    """Remove the folders of earlier runs that were killed before they could: those whose
    harness process is gone."""
    parent = Path(tempfile.gettempdir()) if parent is None else parent
    left = []
    for folder in parent.glob(FOLDER_PREFIX + "*"):
        pid = folder.name.removeprefix(FOLDER_PREFIX).split("-", 1)[0]
        if folder.is_dir() and (not pid.isdigit() or not pid_alive(int(pid))):
            shutil.rmtree(folder, ignore_errors=True)
            left.append(folder)
    return left


def verify_import(module_file: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """In a base system's process: where pgbaton was imported from and the base commit;
    RuntimeError when it is not the exported tree (the run would measure the checkout
    twice)."""
    environ = os.environ if environ is None else environ
    folder = environ.get(BASE_TREE_ENV)
    if not folder:
        raise RuntimeError("a base system runs only with --base REF (or PGBATON_BENCH_BASE)")
    src = Path(folder).resolve() / "src"
    if not Path(module_file).resolve().is_relative_to(src):
        raise RuntimeError(f"pgbaton was imported from {module_file}, not from the base "
                           f"tree {src}")
    return {"pgbaton_file": module_file, "base_commit": environ.get(BASE_COMMIT_ENV, "")}
