"""The console's background processes, started for real against the test database: a Celery
worker, Celery beat and the watcher (as `make run` starts them, with shorter intervals)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from django.conf import settings
from django.db import connection

from console import heartbeats

ROOT = Path(__file__).resolve().parents[1]


def database_url_for_tests() -> str:
    s = connection.settings_dict
    return f"postgresql://{s['USER']}:{s['PASSWORD']}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers_health(url: str) -> bool:
    """Whether the server at `url` answers /health with its JSON: 200, or 503 naming the parts
    that are down (the console's background processes may not have started yet)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except urllib.error.HTTPError as error:
        return error.code == 503 and "status" in json.loads(error.read() or b"{}")
    except (OSError, ValueError):
        return False


def wait_until_healthy(url: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server at {url} exited with {process.returncode}")
        if answers_health(url):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the server at {url} did not become healthy within {timeout:.0f} s")


@contextmanager
def console_server(**extra: str) -> Iterator[str]:
    """The console served by daphne, as `make run` serves it, on the test database."""
    argv = ["-m", "daphne", "-b", "127.0.0.1", "-p", "PORT", "console.asgi:application"]
    with served(argv, **extra) as url:
        yield url


@contextmanager
def gateway_server(**extra: str) -> Iterator[str]:
    """The gateway as the Procfile runs it (uvicorn), on the test database."""
    argv = ["-m", "uvicorn", "gateway.asgi:application", "--host", "127.0.0.1", "--port", "PORT"]
    with served([*argv, "--no-access-log"], **extra) as url:
        yield url


@contextmanager
def served(python_argv: list[str], **extra: str) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url_for_tests(), **extra}
    args = [sys.executable, *(str(port) if a == "PORT" else a for a in python_argv)]
    # Output goes nowhere rather than to a pipe nobody reads, which could block the server.
    process = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def process_env(state_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_tests(),
        "BERTH_STATE_DIR": str(state_dir),
        "BERTH_RECONCILE_EVERY_S": "1",
        "BERTH_WATCH_EVERY_S": "0.3",
        "BERTH_RETRY_BASE_S": "1",
        "BERTH_RETRY_MAX_S": "4",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(extra)
    return env


def spelled_out_for_this_worker(env: dict[str, str]) -> dict[str, str]:
    """`env` with this test worker's Redis database, queue and channel prefix spelled out, for
    processes that read them from the environment rather than from the settings (the Procfile's
    lines name the queues): the settings derive them from PYTEST_XDIST_WORKER, dropped here."""
    if "PYTEST_XDIST_WORKER" not in env:
        return env
    spelled = {key: value for key, value in env.items() if key != "PYTEST_XDIST_WORKER"}
    spelled["REDIS_URL"] = settings.REDIS_URL
    spelled["BERTH_CELERY_QUEUE"] = settings.CELERY_TASK_DEFAULT_QUEUE
    spelled["BERTH_CHANNEL_PREFIX"] = settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
    return spelled


COMMANDS = {
    "worker": [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "console",
        "worker",
        "--loglevel",
        "INFO",
        "--concurrency",
        "2",
        "--without-gossip",
        "--without-mingle",
        "--queues",
    ],
    "beat": [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "console",
        "beat",
        "--loglevel",
        "INFO",
        "--schedule",
    ],
    "watcher": [sys.executable, "manage.py", "watch"],
}


def die_with_parent() -> None:
    """In the child: be killed if the test process dies (a killed test run leaves no orphans)."""
    import ctypes

    os.setsid()
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class ConsoleProcesses:
    """Start, kill and restart the background processes; their output goes to files."""

    def __init__(self, state_dir: Path, env: dict[str, str]) -> None:
        self.state_dir = state_dir
        self.env = env
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def argv(self, name: str) -> list[str]:
        if name == "worker":  # as the Procfile's two worker lines: control, and transfers
            return COMMANDS[name] + [settings.CELERY_TASK_DEFAULT_QUEUE, "-n", "control@%h"]
        if name == "transfers":  # the Procfile's concurrency for transfers
            transfers = [settings.CELERY_TRANSFER_QUEUE, "-n", "transfers@%h", "-c", "4"]
            return COMMANDS["worker"] + transfers
        if name == "beat":
            return COMMANDS[name] + [str(self.state_dir / "beat-schedule")]
        return COMMANDS[name]

    def start(self, name: str) -> None:
        log = open(self.state_dir / f"{name}.log", "ab")  # noqa: SIM115 - kept open for the child
        self.running[name] = subprocess.Popen(
            self.argv(name),
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )

    def kill(self, name: str, signum: int = signal.SIGKILL) -> None:
        process = self.running.pop(name)
        try:
            os.killpg(process.pid, signum)
            process.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:  # a warm shutdown waits for its tasks (a download)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

    def stop_all(self, grace_s: float = 10) -> None:
        """SIGTERM to every process at once; SIGKILL to those still running `grace_s` later (a
        worker's warm shutdown waits for its tasks: a slow download would hold it 30 s)."""
        for process in self.running.values():
            signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for process in self.running.values():
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                signal_group(process, signal.SIGKILL)
                process.wait(timeout=30)
        self.running.clear()

    def log(self, name: str) -> str:
        return (self.state_dir / f"{name}.log").read_text(errors="replace")


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


def purge_queue() -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(settings.CELERY_TASK_DEFAULT_QUEUE, settings.CELERY_TRANSFER_QUEUE)
    client.delete("unacked", "unacked_index")


def kill_engines(state_dir: Path) -> None:
    """Stop every engine process the test started (found by the records under its state dir)."""
    stop_engines(state_dir)
    # Whatever else names the state dir (the console's processes started with it are gone).
    subprocess.run(["pkill", "-9", "-f", str(state_dir)], check=False)


def stop_engines(state_dir: Path) -> None:
    """Kill the engines of the copies in the database, and any engine run from `state_dir`."""
    from deployments.models import Copy

    for pid in Copy.objects.exclude(process_id=None).values_list("process_id", flat=True):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    # Engines run under the supervisor wrapper, whose argv names files under their copy's folder.
    subprocess.run(["pkill", "-9", "-f", str(state_dir / "copies")], check=False)


@contextmanager
def console_processes(state_dir: Path, **extra: str) -> Iterator[ConsoleProcesses]:
    purge_queue()
    processes = ConsoleProcesses(state_dir, process_env(state_dir, **extra))
    for name in ("worker", "transfers", "beat", "watcher"):
        processes.start(name)
    try:
        yield processes
    finally:
        processes.stop_all()
        kill_engines(state_dir)


def wait_for(
    condition: Callable[[], object],
    timeout: float = 60,
    every: float = 0.2,
    what: str = "the condition",
) -> object:
    """Poll until `condition()` is truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def wait_for_a_pass_begun_now(name: str, timeout: float = 60, what: str = "") -> None:
    """Wait until a pass of the loop `name` that began after this call has finished (see
    console.heartbeats.finished_pass): what it does after a change has then been done."""
    now = time.time()
    wait_for(
        lambda: (heartbeats.last_pass_began(name) or 0) > now,
        timeout,
        what=what or f"a pass of {name} begun after {now:.1f}",
    )
