"""How the command line writes: for a terminal, rich tables and a live progress line; for a
pipe or a file, plain lines (columns aligned with spaces, no colour, no animation); for
scripts (--output json), JSON only."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

import click
from rich.console import Console
from rich.status import Status
from rich.table import Table
from rich.text import Text

from berth_sdk.results import Deployment, plain


def terminal() -> bool:
    return sys.stdout.isatty()


def time_text(at: datetime | None) -> str:
    """A time as the console gave it (its time zone: UTC), to the second."""
    return at.strftime("%Y-%m-%d %H:%M:%S") if at else "-"


class Out:
    def __init__(self, json_output: bool) -> None:
        self.json = json_output
        self.rich = Console(highlight=False) if terminal() and not json_output else None

    def line(self, text: str = "") -> None:
        """A line of words (never read as markup: the console's messages are quoted as is)."""
        if self.rich is not None:
            self.rich.print(Text(text))
        else:
            click.echo(text)
            sys.stdout.flush()  # a pipe reading the progress sees each line as it comes

    def data(self, value: Any) -> None:
        click.echo(json.dumps(plain(value), indent=2))

    def json_line(self, value: Any) -> None:
        """One JSON object a line, for what is followed (logs -f)."""
        click.echo(json.dumps(plain(value)), nl=True)
        sys.stdout.flush()

    def table(self, headings: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        cells = [[str(cell) for cell in row] for row in rows]
        if self.rich is not None:
            table = Table(*headings, box=None, header_style="bold", pad_edge=False)
            for row in cells:
                table.add_row(*(Text(cell) for cell in row))
            self.rich.print(table)
            return
        widths = [
            max(len(text) for text in column) for column in zip(headings, *cells, strict=True)
        ]
        for row in [list(headings), *cells]:
            click.echo(
                "  ".join(
                    text.ljust(width) for text, width in zip(row, widths, strict=True)
                ).rstrip()
            )

    def pairs(self, pairs: Sequence[tuple[str, object]]) -> None:
        """Label: value lines, the labels aligned."""
        width = max(len(label) for label, _value in pairs)
        for label, value in pairs:
            self.line(f"{label + ':':<{width + 1}} {value}")


class DeployProgress:
    """A deployment moving through its states: each change on a line of its own, and on a
    terminal a spinner with the current state and the time waited so far."""

    def __init__(self, out: Out) -> None:
        self.out = out
        self.began = time.monotonic()
        self.seen: tuple[str, str] | None = None
        self.spinner: Status | None = None

    def __enter__(self) -> DeployProgress:
        if self.out.rich is not None:
            self.spinner = self.out.rich.status("Waiting for the console…")
            self.spinner.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.spinner is not None:
            self.spinner.stop()

    def update(self, deployment: Deployment) -> None:
        waited = time.monotonic() - self.began
        now = (str(deployment.state), deployment.last_message)
        if now != self.seen:
            self.seen = now
            message = f"  {deployment.last_message}" if deployment.last_message else ""
            self.out.line(f"{waited:5.0f} s  {deployment.state}{message}")
        if self.spinner is not None:
            copies = f"{deployment.copies_ready}/{deployment.copies_wanted} copies ready"
            self.spinner.update(Text(f"{deployment.state}, {copies}, {waited:.0f} s"))
