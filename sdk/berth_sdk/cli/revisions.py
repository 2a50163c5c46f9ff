"""berth revisions, rollback, auto-rollback: each change of what a deployment is asked to be,
numbered; one shown or two compared, in the console's words; and going back to one."""

from __future__ import annotations

import json

import click

from berth_sdk.results import Revision, RevisionChange

from .app import App, cli, output_option
from .deployments import COMMENT, NAME, said
from .output import Out, time_text

NUMBER = click.IntRange(min=1)


@cli.command(short_help="A deployment's revisions; one of them, or two compared.")
@NAME
@click.argument("number", type=NUMBER, required=False)
@click.option("--compare", "other", type=NUMBER, metavar="M", help="the changes from NUMBER to M")
@output_option
@click.pass_obj
def revisions(app: App, name: str, number: int | None, other: int | None) -> None:
    """Every change of what NAME is asked to be, newest first (* marks the one it is asked to
    be now). With NUMBER: that revision, what it changed and what it asked for. With
    --compare M: what changes from revision NUMBER to revision M."""
    if number is None and other is not None:
        raise click.UsageError("--compare M needs the revision NUMBER to compare it with")
    if number is None:
        list_revisions(app, name)
    elif other is None:
        show_revision(app, name, number)
    else:
        compare(app, name, number, other)


def list_revisions(app: App, name: str) -> None:
    found = app.client().serving.revisions(name)
    if app.out.json:
        app.out.data(found)
        return
    if not found:
        app.out.line(f"{name} has no revisions yet.")
        return
    app.out.table(
        ["", "REVISION", "WHEN", "BY", "OUTCOME", "COMMENT", "WHY"],
        [revision_row(r) for r in found],
    )
    app.out.line(f"* what {name} is asked to be now; back to another: berth rollback {name} N")


def revision_row(revision: Revision) -> list[object]:
    return [
        "*" if revision.current else "",
        revision.number,
        time_text(revision.at),
        revision.by,
        revision.outcome,
        revision.comment or "-",
        revision.why,
    ]


def show_revision(app: App, name: str, number: int) -> None:
    found = app.client().serving.revision(name, number)
    if app.out.json:
        app.out.data(found)
        return
    app.out.pairs(revision_pairs(found))
    app.out.line()
    if found.number == 1:
        app.out.line("Changes: none, the first revision")
    else:
        say_changes(app.out, f"Changes from revision {found.number - 1}:", found.changes)
    app.out.line()
    app.out.line("Asked for:")
    app.out.pairs([(f"  {key}", json.dumps(value, ensure_ascii=False))
                   for key, value in sorted(found.spec.items())])  # fmt: skip


def revision_pairs(revision: Revision) -> list[tuple[str, object]]:
    return [
        ("revision", f"{revision.number} (now)" if revision.current else revision.number),
        ("when", time_text(revision.at)),
        ("by", revision.by),
        ("why", revision.why),
        ("comment", revision.comment or "-"),
        ("restores", revision.restores or "-"),
        ("outcome", revision.outcome),
    ]


def say_changes(out: Out, heading: str, changes: list[RevisionChange]) -> None:
    out.line(heading)
    for change in changes:
        out.line(f"  {change.words}")


def compare(app: App, name: str, number: int, other: int) -> None:
    changes = app.client().serving.compare_revisions(name, number, other)
    if app.out.json:
        app.out.data(changes)
    elif not changes:
        app.out.line(f"Revisions {number} and {other} of {name} ask for the same.")
    else:
        say_changes(app.out, f"From revision {number} to {other}:", changes)


@cli.command(short_help="Make a deployment what one of its revisions asked, again.")
@NAME
@click.argument("number", type=NUMBER)
@COMMENT
@output_option
@click.pass_obj
def rollback(app: App, name: str, number: int, comment: str) -> None:
    """Make NAME what revision NUMBER asked, as a new revision; where that changes what the
    copies run (variant, size, engine settings), new copies replace the old ones
    make-before-break."""
    rolled = app.client().serving.roll_back(name, number, comment)
    said(app, rolled, "Rolling back", f" to revision {number}")


@cli.command("auto-rollback", short_help="Roll back a revision whose copies never serve: on|off.")
@NAME
@click.argument("switch", type=click.Choice(["on", "off"]))
@output_option
@click.pass_obj
def auto_rollback(app: App, name: str, switch: str) -> None:
    """on: a revision of NAME whose copies never serve is rolled back, by itself, to the last
    one that served; off: it stays until you change it."""
    changed = app.client().serving.set_auto_rollback(name, switch == "on")
    said(app, changed, f"Auto-rollback {switch} for")
