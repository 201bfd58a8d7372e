"""``planexec schema``: the plan's versioned JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import click

from planexec.plan import PLAN_SCHEMA_VERSION, plan_json_schema

__all__ = ["schema"]


@click.command()
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the schema to this file instead of printing it.",
)
def schema(output: Path | None) -> None:
    """Print the JSON Schema of a plan (versioned)."""
    text = json.dumps(plan_json_schema(), indent=2, ensure_ascii=False) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    output.write_text(text, encoding="utf-8")
    click.echo(f"wrote the plan schema (version {PLAN_SCHEMA_VERSION}) to {output}", err=True)
