"""The documentation a newcomer holds: a README that fits on two screens and links to docs/, and
docs that name every setting Berth reads, every `berth` command and every management command,
with no link to a file that is not there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
from berth_sdk.cli import cli

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md"))
# The settings' one home, and the few modules that read a tunable of their own.
SETTINGS_READERS = [REPO / "console" / "settings.py", REPO / "gateway" / "conf.py"]
README_LINES = 80  # two screens of a terminal or a repository page


def documented() -> str:
    return "\n".join(path.read_text() for path in [REPO / "README.md", *DOCS])


def variables_read(path: Path) -> set[str]:
    """Every environment variable a module reads through console/env.py's readers (a secret
    also from NAME_FILE)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        reader = node.func.id
        first = node.args[0] if node.args else None
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            continue
        if reader.startswith("env_") or reader in {"redis_url", "database_from_url"}:
            names.add(first.value)
            if reader in {"env_secret", "env_token"}:
                names.add(first.value + "_FILE")
    return names


def commands(group: click.Group, prefix: str = "berth ") -> list[str]:
    found = []
    for name, command in sorted(group.commands.items()):
        found.append(prefix + name)
        if isinstance(command, click.Group):
            found += commands(command, f"{prefix}{name} ")
    return found


def test_the_readme_is_a_quickstart_that_fits_on_two_screens():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= README_LINES
    assert "make run " in readme and "make test " in readme  # the two commands
    for doc in DOCS:
        assert f"(docs/{doc.name})" in readme, f"the README does not link to docs/{doc.name}"


def test_the_scan_finds_the_settings_it_should():
    found = variables_read(REPO / "console" / "settings.py")
    assert {"DATABASE_URL", "BERTH_METRICS_TOKEN", "BERTH_METRICS_TOKEN_FILE"} <= found
    assert len(found) > 60


def test_every_setting_is_documented():
    text = documented()
    names = set().union(*(variables_read(path) for path in SETTINGS_READERS))
    assert sorted(n for n in names if f"`{n}`" not in text) == []


def test_every_berth_command_is_documented():
    text = documented()
    found = commands(cli)
    assert "berth quota set" in found and "berth apply" in found
    assert [c for c in found if f"`{c}" not in text] == []


def test_every_management_command_is_documented():
    text = documented()
    ours = sorted(p.stem for p in REPO.glob("*/management/commands/*.py") if p.stem != "__init__")
    assert "addcluster" in ours
    assert [name for name in ours if not re.search(rf"\b{name}\b", text)] == []


def test_every_relative_link_leads_to_a_file():
    broken = []
    for path in [REPO / "README.md", *DOCS]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if not target.startswith(("http://", "https://", "mailto:")):
                if not (path.parent / target).exists():
                    broken.append(f"{path.relative_to(REPO)} → {target}")
    assert broken == []
