"""berth export, apply: deployments written to a YAML file, and a file made true. What is wrong
in a file is said at its line: YAML that does not parse at PyYAML's mark, a value the console
refuses at the node its field names (document.deployments.1.routing: that entry's routing)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import click
import yaml

from berth_sdk.config_files import ACTIONS, ApplyPlan, PlanItem
from berth_sdk.errors import ApplyRefusedError, BadRequestError, BerthError, UnprocessableError

from .app import App, cli, output_option

STDIN = "-"
DOCUMENT = "document"  # the field path of the file in an apply's body
PLANNED = {
    "create": "to create", "update": "to update", "unchanged": "unchanged",
    "delete": "to delete", "would_not_fit": "would not fit", "refused": "refused",
}  # fmt: skip
DONE = {**PLANNED, "create": "created", "update": "updated", "delete": "deleted"}


class DatesAsText(yaml.SafeLoader):
    """YAML's safe reading, except that a date stays the text it was written as (a model
    revision such as 2024-01-01 is a tag name, and JSON has no dates)."""


DatesAsText.yaml_implicit_resolvers = {
    first: [(tag, rule) for tag, rule in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class FileError(BerthError):
    """What is wrong in a file, at its line: FILE:LINE: words."""


@dataclass(frozen=True)
class Source:
    """A file's text and the name its errors are said under."""

    name: str
    text: str

    @classmethod
    def read(cls, path: str) -> Source:
        if path == STDIN:
            return cls("<stdin>", sys.stdin.read())
        with open(path, encoding="utf-8") as file:
            return cls(path, file.read())

    def document(self) -> Any:
        try:
            return yaml.load(self.text, Loader=DatesAsText)  # noqa: S506 (a SafeLoader)
        except yaml.YAMLError as error:
            raise FileError(self.not_yaml(error)) from None

    def not_yaml(self, error: yaml.YAMLError) -> str:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error)
        where = f"{self.name}:{mark.line + 1}" if mark is not None else self.name
        return f"{where}: not valid YAML: {problem}"

    def at(self, field: str) -> int | None:
        """The line of the node a field path names (`document.deployments.1.routing`), else of
        the nearest parent there is; None for a path outside the document."""
        parts = field.split(".")
        if parts[0] != DOCUMENT:
            return None
        node = yaml.compose(self.text)
        line = node.start_mark.line if node is not None else 0
        for part in parts[1:]:
            found = child(node, part)
            if found is None:
                break
            line, node = found
        return line + 1


def child(node: yaml.Node | None, part: str) -> tuple[int, yaml.Node] | None:
    """A mapping's value by its key (at the key's line), a sequence's item by its index."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == part:
                return key.start_mark.line, value
    if isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
        item = node.value[int(part)]
        return item.start_mark.line, item
    return None


@cli.command(short_help="Write deployments as a YAML file, for `berth apply -f`.")
@click.argument("names", nargs=-1)
@click.option("--team", help="every deployment of this team")
@output_option
@click.pass_obj
def export(app: App, names: tuple[str, ...], team: str | None) -> None:
    """The deployments NAMES (or TEAM's, or every one you may see) as the YAML document that
    `berth apply -f` reads: where each runs, then what it is asked to be."""
    document = app.client().config_files.export(names, team)
    if app.out.json:
        app.out.data(document)
    else:
        click.echo(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), nl=False)


@cli.command(short_help="Make a YAML file's deployments true (--dry-run: only the plan).")
@click.option("-f", "--file", "path", metavar="FILE", help="the YAML file; - reads standard input")
@click.option("--dry-run", is_flag=True, help="only say what would change; change nothing")
@click.option("--prune", is_flag=True, help="delete the deployments of the file's teams it omits")
@click.option("--schema", is_flag=True, help="print the file's JSON Schema, and nothing else")
@output_option
@click.pass_obj
def apply(app: App, path: str | None, dry_run: bool, prune: bool, schema: bool) -> None:
    """Create, update (or with --prune delete) deployments until they are what FILE says, all
    or nothing: when one would not fit or is refused, nothing is done (exit 1, with the plan).
    A value the console refuses is said at its line of FILE."""
    if schema:
        app.out.data(app.client().config_files.apply_schema())
        return
    if path is None:
        raise click.UsageError(
            "give -f FILE (the YAML to apply; - reads standard input), or --schema"
        )
    source = Source.read(path)
    try:
        plan = app.client().config_files.apply(source.document(), dry_run=dry_run, prune=prune)
    except ApplyRefusedError as refused:
        if not app.out.json:
            show_plan(app, refused.plan)
        raise
    except (BadRequestError, UnprocessableError) as error:
        line = source.at(error.field)
        if line is None:
            raise
        raise FileError(f"{source.name}:{line}: {error.message}") from None
    if app.out.json:
        app.out.data(plan)
    else:
        show_plan(app, plan)


def show_plan(app: App, plan: ApplyPlan) -> None:
    if plan.items:
        app.out.table(["NAME", "ACTION", "CHANGES", "REASON"], [plan_row(i) for i in plan.items])
    app.out.line(summary(plan))


def plan_row(item: PlanItem) -> list[object]:
    changes = "; ".join(change.words for change in item.changes)
    return [item.name, item.action, changes or "-", item.reason or "-"]


def summary(plan: ApplyPlan) -> str:
    """ "2 to create, 1 unchanged" (planned) or "Applied: 2 created, 1 unchanged" (done)."""
    words = DONE if plan.applied else PLANNED
    counted = [f"{plan.counts[a]} {words[a]}" for a in ACTIONS if plan.counts.get(a)]
    said = ", ".join(counted) or "nothing to apply"
    return f"Applied: {said}" if plan.applied else said
