"""berth cost: what the room deployments held cost, per deployment or team."""

from __future__ import annotations

import click

from berth_sdk.results import CostItem

from .app import App, cli, output_option

GROUPS = ("deployment", "team")


@cli.command(short_help="What the room deployments held cost, per deployment or team.")
@click.option("--group-by", type=click.Choice(GROUPS), help="what to sum by  [default: deployment]")
@click.option("--from", "since", help="the first UTC day, 2026-03-01  [default: 6 days before]")
@click.option("--to", "until", help="the last UTC day, included  [default: today]")
@output_option
@click.pass_obj
def cost(app: App, group_by: str | None, since: str | None, until: str | None) -> None:
    """The cost of the GPU (and CPU) room your operated teams' deployments held (everyone's,
    for platform admins) at the admin's prices, and per 1M tokens served, costliest first."""
    report = app.client().cost(group_by, since=since, until=until)
    if app.out.json:
        app.out.data(report)
        return
    span = f"{report.first_day} to {report.last_day}"
    if not report.items:
        app.out.line(f"No room held from {span}.")
        return
    app.out.line(f"Cost from {span} (UTC), in {report.currency}:")
    app.out.table(
        [(group_by or "deployment").upper(), "COST", "TOKENS", "PER 1M TOKENS", "UNPRICED"],
        [cost_row(item) for item in report.items],
    )


def cost_row(item: CostItem) -> list[object]:
    per_million = item.cost_per_million_tokens
    return [
        item.name,
        f"{item.cost:.2f}",
        item.tokens,
        "-" if per_million is None else f"{per_million:.2f}",
        ", ".join(item.unpriced) or "-",
    ]
