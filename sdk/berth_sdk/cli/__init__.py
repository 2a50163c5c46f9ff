"""The `berth` command line, built on BerthClient: `berth --help` lists its commands."""

from __future__ import annotations

from . import applying, chat, cost, deployments, placement, quota, revisions, session, usage  # noqa: F401 - each adds its commands
from .app import cli


def main() -> None:
    cli(prog_name="berth")
