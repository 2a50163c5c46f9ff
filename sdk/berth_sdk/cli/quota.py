"""berth quota set, ls and rm: limits on an API key, a team or a deployment."""

from __future__ import annotations

import click

from berth_sdk.quotas import LIMITS, Quota

from .app import App, cli, output_option

WORDS = {
    "tokens_per_day": "tokens/day",
    "tokens_per_month": "tokens/month",
    "requests_per_minute": "requests/min",
    "tokens_per_minute": "tokens/min",
}


@cli.group(short_help="Quotas on an API key, a team or a deployment.")
def quota() -> None:
    """Quotas held by every gateway process: over one, requests get 429 with Retry-After."""


@quota.command("set")
@click.option("--key", "api_key", type=int, help="the id of one of your API keys")
@click.option("--team", help="a team: all of its deployments' traffic")
@click.option("--deployment", help="a deployment")
@click.option("--tokens-per-day", type=int, help="prompt + completion tokens, UTC days")
@click.option("--tokens-per-month", type=int, help="prompt + completion tokens, UTC months")
@click.option("--requests-per-minute", type=int, help="requests within the last 60 s")
@click.option("--tokens-per-minute", type=int, help="prompt + completion tokens a minute")
@click.option("--shadow", is_flag=True, help="only count and report what it would refuse")
@output_option
@click.pass_obj
def set_quota(
    app: App,
    api_key: int | None,
    team: str | None,
    deployment: str | None,
    tokens_per_day: int | None,
    tokens_per_month: int | None,
    requests_per_minute: int | None,
    tokens_per_minute: int | None,
    shadow: bool,
) -> None:
    """Set the quota of one key, team or deployment (it replaces the one there was); the
    limits left out are not limited."""
    found = app.client().quotas.set(
        api_key=api_key, team=team, deployment=deployment, tokens_per_day=tokens_per_day,
        tokens_per_month=tokens_per_month, requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute, shadow=shadow,
    )  # fmt: skip
    if app.out.json:
        app.out.data(found)
    else:
        app.out.line(f"Quota {found.id} set on {found.subject}: {limits_words(found)}.")


@quota.command("ls")
@output_option
@click.pass_obj
def list_quotas(app: App) -> None:
    """The quotas on your keys, your teams and their deployments, with what is used."""
    found = app.client().quotas.list()
    if app.out.json:
        app.out.data(found)
        return
    if not found:
        app.out.line("No quotas. Set one: berth quota set --team TEAM --tokens-per-day N")
        return
    app.out.table(
        ["ID", "ON", "LIMITS", "USED", "SHADOW"],
        [
            [q.id, q.subject, limits_words(q), used_words(q), "yes" if q.shadow else "no"]
            for q in found
        ],
    )


@quota.command("rm")
@click.argument("quota_id", type=int)
@output_option
@click.pass_obj
def remove_quota(app: App, quota_id: int) -> None:
    """Remove a quota (its id: berth quota ls)."""
    app.client().quotas.remove(quota_id)
    if app.out.json:
        app.out.data({"removed": quota_id})
    else:
        app.out.line(f"Quota {quota_id} removed.")


def limits_words(found: Quota) -> str:
    return ", ".join(
        f"{value:,} {WORDS[name]}" for name in LIMITS if (value := getattr(found, name))
    )


def used_words(found: Quota) -> str:
    return ", ".join(f"{use['used']:,} {WORDS[name]}" for name, use in found.use.items()) or "-"
