"""berth usage: requests and tokens through the gateway per team, key, user or deployment."""

from __future__ import annotations

import click

from .app import App, cli, output_option

GROUPS = ("team", "key", "user", "deployment")
BUCKETS = ("hour", "day")


@cli.command(short_help="Requests and tokens per team, key, user or deployment.")
@click.option("--group-by", type=click.Choice(GROUPS), help="what to sum by  [default: team]")
@click.option("--from", "since", help="2026-03-01 or 2026-03-01T14:30 (UTC)  [default: a week ago]")
@click.option("--to", "until", help="before this time; a date includes its day  [default: now]")
@click.option("--bucket", type=click.Choice(BUCKETS), help="per hour or day  [default: day]")
@output_option
@click.pass_obj
def usage(
    app: App, group_by: str | None, since: str | None, until: str | None, bucket: str | None
) -> None:
    """Requests, prompt and completion tokens and mean time to first token through the
    gateway, oldest first: your operated teams' (everyone's, for platform admins)."""
    rows = list(app.client().usage(group_by, since=since, until=until, bucket=bucket))
    if app.out.json:
        app.out.data(rows)
        return
    if not rows:
        app.out.line("No requests through the gateway in that time.")
        return
    app.out.table(
        ["FROM", (group_by or "team").upper(), "REQUESTS", "PROMPT", "COMPLETION", "MEAN TTFT"],
        [
            [
                row.bucket_start.strftime("%Y-%m-%d %H:%M") if row.bucket_start else "-",
                row.name or "-",
                row.requests,
                row.prompt_tokens,
                row.completion_tokens,
                "-" if row.mean_ttft_s is None else f"{row.mean_ttft_s * 1000:.0f} ms",
            ]
            for row in rows
        ],
    )
