"""`pgbaton doctor`: checks a live installation and shows the evidence for each finding."""

from __future__ import annotations

import click


@click.command()
def doctor() -> None:
    """Check a live installation (not built yet)."""
    raise click.ClickException("pgbaton doctor is not built yet")
