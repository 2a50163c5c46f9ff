"""The layers of DESIGN §1: placement → clusters → catalog → deployments → gateway, with console's
base below them all and its wiring above. A domain module never imports a higher layer, not even
lazily inside a function; pages (views, API routers, admin, URLs, consumers, forms, template tags)
and management commands are the top layer and may use any app."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
APPS = ("placement", "clusters", "catalog", "deployments", "gateway")
RANK = {app: rank for rank, app in enumerate(APPS)}
PAGE_MODULES = {"views", "api", "admin", "urls", "consumers", "forms"}
PAGE_FOLDERS = {"views", "templatetags", "management", "migrations"}
# console/ is both: its base (teams, roles, keys, live, settings) sits below every app and imports
# none but placement; its wiring assembles the apps into the project and sits above them.
CONSOLE_BASE = {
    "access",
    "accounts",
    "api_schema",
    "apps",
    "audit",
    "auth",
    "choices",
    "claims",
    "crypto",
    "demo_passwords",
    "env",
    "heartbeats",
    "keys",
    "lists",
    "live",
    "logins",
    "models",
    "outbound",
    "prometheus",
    "security",
    "settings",
    "signals",
    "sso",
    "task_figures",
    "team_actions",
    "time_zones",
}
# __init__ loads the Celery app, as Django projects do.
CONSOLE_WIRING = {
    "__init__",
    "api_v1",
    "asgi",
    "celery",
    "context",
    "demo",
    "errors",
    "events",
    "events_api",
    "keys_api",
    "live_logs",
    "live_render",
    "overview",
    "services",
    "system_status",
}
CONSOLE_WIRING |= {"routing", *PAGE_MODULES}


def is_page(path: Path) -> bool:
    parts = path.relative_to(REPO).parts
    return path.stem in PAGE_MODULES or bool(PAGE_FOLDERS & set(parts[1:-1]))


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every absolute import in the file, at any depth (a lazy import counts too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def upward_imports(path: Path, allowed_rank: int) -> list[str]:
    """The imports in the file of an app ranked above `allowed_rank` (or of console's wiring)."""
    wrong = []
    for line, module in imported_modules(path):
        top, _, rest = module.partition(".")
        above = RANK.get(top, -1) > allowed_rank
        wiring = top == "console" and rest.split(".")[0] in CONSOLE_WIRING
        if above or wiring:
            wrong.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    return wrong


def domain_modules(app: str) -> list[Path]:
    return [p for p in sorted((REPO / app).rglob("*.py")) if not is_page(p)]


@pytest.mark.parametrize("app", APPS)
def test_no_domain_module_imports_a_higher_layer(app: str) -> None:
    wrong = [w for path in domain_modules(app) for w in upward_imports(path, RANK[app])]
    assert wrong == []


def test_console_base_imports_no_app_but_placement_and_no_wiring() -> None:
    """placement is pure Python below every layer (its words write units for all of them)."""
    base = [REPO / "console" / f"{name}.py" for name in sorted(CONSOLE_BASE)]
    wrong = [w for path in base for w in upward_imports(path, RANK["placement"])]
    assert wrong == []


def test_every_console_module_is_either_base_or_wiring() -> None:
    """A new console module must be placed on purpose: below the apps or above them."""
    names = {p.stem for p in (REPO / "console").glob("*.py")}
    assert names - CONSOLE_BASE - CONSOLE_WIRING == set()


def test_the_scan_sees_a_lazy_upward_import(tmp_path: Path) -> None:
    module = REPO / "clusters" / "_layers_probe.py"
    module.write_text("def f():\n    from deployments.models import Copy\n    return Copy\n")
    try:
        assert upward_imports(module, RANK["clusters"]) == [
            "clusters/_layers_probe.py:2 imports deployments.models"
        ]
    finally:
        module.unlink()


PLACEMENT_ALONE = """
import sys
import placement, placement.cli, placement.scenario
loaded = sorted({name.split(".")[0] for name in sys.modules})
print(" ".join(n for n in loaded if n in {"django", "clusters", "catalog", "deployments",
                                            "gateway", "console"}))
"""


def test_placement_imports_without_django_or_any_app() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PLACEMENT_ALONE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == ""
