"""The demo is a switch (BERTH_DEMO=1, which `make run` sets): seed_demo runs only under it, and
without it the web, gateway and worker processes refuse to start while a user still has a demo
password, saying who and how to change it; management commands still run."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from django.conf import global_settings
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from tests.processes import ROOT, database_url_for_tests, free_port, served

pytestmark = pytest.mark.django_db(transaction=True)
SERVERS = {
    "web process": ["-m", "daphne", "-b", "127.0.0.1", "-p", "PORT", "console.asgi:application"],
    "gateway": ["-m", "uvicorn", "gateway.asgi:application", "--port", "PORT"],
    "worker": ["-m", "celery", "-A", "console", "worker", "--pool", "solo", "--queues", "none"],
}


@pytest.fixture
def demo(settings):
    # Hashed as a real install hashes them, so that the processes started here can check them.
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    settings.DEMO = True
    call_command("seed_demo")
    settings.DEMO = False


def not_a_demo() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "BERTH_DEMO"}
    return {**env, "DATABASE_URL": database_url_for_tests()}


def start(argv: list[str]) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, *(str(free_port()) if a == "PORT" else a for a in argv)]
    return subprocess.run(
        args, cwd=ROOT, env=not_a_demo(), capture_output=True, text=True, timeout=60
    )


def test_seed_demo_runs_only_in_a_demo(settings):
    settings.DEMO = False
    with pytest.raises(CommandError, match="it runs only in a demo, with BERTH_DEMO=1"):
        call_command("seed_demo")
    assert not get_user_model().objects.filter(username="admin").exists()


@pytest.mark.parametrize("process", sorted(SERVERS))
def test_without_the_switch_a_process_refuses_demo_passwords(demo, process):
    refused = start(SERVERS[process])
    assert refused.returncode != 0
    assert (
        f"The {process} does not start: the demo password of admin, operator, viewer is still "
        "set, and BERTH_DEMO is not, so this is not a demo. Change each with `python manage.py "
        "changepassword USERNAME`"
    ) in refused.stderr


def test_management_commands_still_run_and_changed_passwords_let_it_start(demo, monkeypatch):
    command = [sys.executable, "manage.py", "createapikey", "admin", "--scope", "read"]
    made = subprocess.run(
        command, cwd=ROOT, env=not_a_demo(), capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    for user in get_user_model().objects.filter(username__in=["admin", "operator", "viewer"]):
        user.set_password(f"{user.username}-now-a-real-secret")
        user.save()
    monkeypatch.delenv("BERTH_DEMO", raising=False)
    with served(SERVERS["gateway"]) as url:  # it starts, and answers
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
