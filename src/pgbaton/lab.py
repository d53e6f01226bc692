"""`pgbaton lab`: the seed's claim strategies side by side, measured on this machine."""

from __future__ import annotations

import click


@click.command()
def lab() -> None:
    """Compare claim strategies (not built yet)."""
    raise click.ClickException("pgbaton lab is not built yet")
