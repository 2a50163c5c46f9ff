"""The embedded PostgreSQL and Redis ask for passwords (an engine on the same machine must not
walk in), kept in var/keys.json (0600) and never printed; an older var/ whose PostgreSQL
trusted local connections gets its password and keeps its data. Each test runs its own
servers under a var/ of its own, through `python -m console.services` as a user would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
INHERITED_SECRETS = (
    "DATABASE_URL",
    "REDIS_URL",
    "BERTH_POSTGRES_PASSWORD",
    "BERTH_REDIS_PASSWORD",
    "DJANGO_SECRET_KEY",
    "BERTH_CREDENTIALS_KEY",
)


def services(var: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in INHERITED_SECRETS}
    done = subprocess.run(
        [sys.executable, "-m", "console.services", *args],
        env={**env, "BERTH_VAR_DIR": str(var)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def started(var: Path) -> dict[str, str]:
    """The environment `exec` hands to a command."""
    printed = services(
        var,
        "exec",
        "--",
        sys.executable,
        "-c",
        "import os, json; print(json.dumps(dict(os.environ)))",
    )
    return json.loads(printed.strip().splitlines()[-1])


def redis_answer(url_port: int, command: str) -> bytes:
    with socket.create_connection(("127.0.0.1", url_port), timeout=5) as sock:
        sock.sendall(command.encode() + b"\r\n")
        return sock.recv(200)


@pytest.fixture
def var(tmp_path):
    folder = tmp_path / "var"
    yield folder
    services(folder, "stop")


def ports(var: Path) -> dict[str, int]:
    return json.loads((var / "services.json").read_text())


def test_both_servers_ask_for_the_generated_passwords(var):
    env = started(var)
    keys = json.loads((var / "keys.json").read_text())
    assert oct((var / "keys.json").stat().st_mode & 0o777) == "0o600"
    password = keys["BERTH_POSTGRES_PASSWORD"]
    assert len(password) >= 40 and password in env["DATABASE_URL"]
    with psycopg.connect(env["DATABASE_URL"]) as connection:
        assert connection.execute("SELECT 1").fetchone() == (1,)
    anonymous = f"postgresql://postgres@127.0.0.1:{ports(var)['postgres_port']}/berth"
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(anonymous, connect_timeout=5)
    redis = ports(var)["redis_port"]
    assert redis_answer(redis, "PING").startswith(b"-NOAUTH")
    assert redis_answer(redis, f"AUTH {keys['BERTH_REDIS_PASSWORD']}") == b"+OK\r\n"
    # Neither password is on a command line any process shows.
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            shown = cmdline.read_bytes()
        except OSError:
            continue
        assert password.encode() not in shown
        assert keys["BERTH_REDIS_PASSWORD"].encode() not in shown
    status = services(var, "status")
    assert password not in status and "****" in status


def test_an_older_var_that_trusted_everyone_gets_its_password_and_keeps_its_data(var):
    env = started(var)
    with psycopg.connect(env["DATABASE_URL"], autocommit=True) as connection:
        connection.execute("CREATE TABLE kept (n int)")
        connection.execute("INSERT INTO kept VALUES (42)")
    # As an older Berth left it: trust in pg_hba.conf, no passwords in keys.json.
    hba = var / "postgres" / "pg_hba.conf"
    hba.write_text(hba.read_text().replace("scram-sha-256", "trust"))
    services(var, "stop")
    keys = json.loads((var / "keys.json").read_text())
    del keys["BERTH_POSTGRES_PASSWORD"], keys["BERTH_REDIS_PASSWORD"]
    (var / "keys.json").write_text(json.dumps(keys))
    anonymous = f"postgresql://postgres@127.0.0.1:{ports(var)['postgres_port']}/berth"

    env = started(var)
    assert "trust" not in [
        line.split()[-1]
        for line in hba.read_text().splitlines()
        if line.split() and not line.startswith("#")
    ]
    with psycopg.connect(env["DATABASE_URL"]) as connection:
        assert connection.execute("SELECT n FROM kept").fetchone() == (42,)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(anonymous, connect_timeout=5)
    assert (
        json.loads((var / "keys.json").read_text())["DJANGO_SECRET_KEY"]
        == keys["DJANGO_SECRET_KEY"]
    )
