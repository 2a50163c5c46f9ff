"""Starts engine processes, finds them again after the console restarts, and stops them.

Each engine runs under a tiny wrapper, this file run as a script::

    python -I clusters/backends/supervisor.py wrap EXIT_FILE [--as UID:GID] -- ENGINE_ARGV…

The wrapper leads a new session (so the engine and everything it forks share one process
group, whose id is the wrapper's pid), runs the engine as its child with the wrapper's own
stdout/stderr (the copy's log file, never a pipe: nobody may have to read a pipe for the engine
to keep running), waits for it and writes its exit status into EXIT_FILE. Whoever started it can
also reap it with waitpid; a console that restarted cannot, and reads the file instead.

With ``--as`` the engine runs as that unprivileged user (its team's engine user, see
isolation.py) while the wrapper stays the console's: the engine cannot touch the exit file,
the copy's record or its log file, which it only holds open for writing.

Signals meant for the copy go to the whole group (``stop`` does that). The wrapper survives
SIGTERM, SIGINT and SIGHUP so that it can still record how the engine ended.

This module uses only the standard library: the wrapper runs as a plain script, without the
console on its path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

WRAPPER = Path(__file__).resolve()
PROC = Path("/proc")
POLL_S = 0.05
# A log line longer than this with no newline yet is handed out anyway (a tqdm bar that redraws
# itself with carriage returns forever would otherwise never be read).
MAX_PARTIAL_LINE = 64 * 1024
SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "fish", "csh", "tcsh"}

# Processes this process started, by pid, so that any backend instance in it can reap them.
_children: dict[int, subprocess.Popen[bytes]] = {}


class SupervisorError(Exception):
    """A process could not be started; the message says why in words."""


# ---------------------------------------------------------------- starting


def check_argv(argv: Sequence[str]) -> None:
    """Refuse anything but an argument list: no shell, no command line in one string."""
    if isinstance(argv, str) or not argv:
        raise SupervisorError("an engine is started from a list of arguments, not a string")
    if not all(isinstance(arg, str) for arg in argv):
        raise SupervisorError("every argument of an engine's command line must be a string")
    program = os.path.basename(argv[0])
    if program in SHELLS and "-c" in argv[1:]:
        raise SupervisorError(f"engines are not started through a shell ({program} -c)")
    if len(argv) == 1 and any(char.isspace() for char in argv[0]):
        raise SupervisorError(f"{argv[0]!r} looks like a shell command line, not a program")


def find_program(program: str, env: Mapping[str, str]) -> str | None:
    """Where the program is, looked up on the PATH the engine will have."""
    if os.sep in program:
        return program if os.access(program, os.X_OK) else None
    return shutil.which(program, path=env.get("PATH", os.defpath))


def wrapper_argv(
    exit_path: Path, argv: Sequence[str], user: tuple[int, int] | None = None
) -> list[str]:
    # -I: the wrapper ignores PYTHON* variables and does not put its own folder on sys.path, so
    # no module next to this file can shadow the standard library.
    run_as = ["--as", f"{user[0]}:{user[1]}"] if user else []
    return [sys.executable, "-I", str(WRAPPER), "wrap", str(exit_path), *run_as, "--", *argv]


def start(
    argv: Sequence[str],
    *,
    cwd: str | Path,
    env: Mapping[str, str],
    log_path: Path,
    exit_path: Path,
    user: tuple[int, int] | None = None,
) -> int:
    """Start argv under the wrapper in its own session; returns the pid (= process group id).
    `user` (uid, gid): the engine itself runs as that user."""
    check_argv(argv)
    _reap_finished()
    if find_program(argv[0], env) is None:
        raise SupervisorError(f"{argv[0]} is not installed on this machine (not found on PATH)")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    exit_path.parent.mkdir(parents=True, exist_ok=True)
    exit_path.unlink(missing_ok=True)
    with open(log_path, "ab") as log:  # the child keeps its own descriptor; ours closes here
        try:
            process = subprocess.Popen(
                wrapper_argv(exit_path, argv, user),
                cwd=str(cwd),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as error:
            raise SupervisorError(f"cannot start {argv[0]}: {error}") from error
    _children[process.pid] = process
    return process.pid


def _reap_finished() -> None:
    """Collect children that ended, so none lingers as a zombie (their codes stay known)."""
    for process in _children.values():
        process.poll()


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now (another process may still take it before the engine binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


# ---------------------------------------------------------------- looking at processes


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: state, ppid, pgrp, …; None if there is no such pid."""
    try:
        raw = (PROC / str(pid) / "stat").read_text(errors="replace")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _cmdline(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _has_proc() -> bool:
    return (PROC / "self" / "stat").exists()


def reap(pid: int) -> int | None:
    """The wrapper's return code if this process started it and it has ended (reaps it)."""
    process = _children.get(pid)
    return None if process is None else process.poll()


def is_alive(pid: int | None, marker: str = "") -> bool:
    """Whether pid runs (a zombie does not count) and, given a marker, is the process we started.

    The marker (the copy's exit file path, which the wrapper carries on its command line) guards
    against a pid that the system gave to another process after ours ended.
    """
    if not pid or pid <= 0:
        return False
    process = _children.get(pid)
    if process is not None:
        # Our own child: its pid cannot be reused before we reap it, and we know its argv. Its
        # /proc command line would race its start (between fork and exec it is still ours) and
        # report a copy that fails at once as "gone", its exit status lost.
        return process.poll() is None and (not marker or marker in map(str, process.args))
    if not _has_proc():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X", "x"):
        return False
    return not marker or marker in _cmdline(pid)


def group_members(pgid: int) -> list[int]:
    """Live processes (not zombies) of a process group."""
    if not _has_proc():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in "ZXx":
            members.append(int(entry.name))
    return members


def read_exit_file(exit_path: Path) -> int | None:
    try:
        return int(exit_path.read_text().strip())
    except (OSError, ValueError):
        return None


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so that a reader sees the old file or the whole new one, never
    half of it: into a file of this writer's own beside it, then renamed over it. (Here, not in
    a module of its own: the wrapper runs as a plain script and imports nothing of Berth.)"""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def write_exit_file(exit_path: Path, code: int) -> None:
    write_atomically(exit_path, f"{code}\n")


def exit_code(pid: int, exit_path: Path) -> int | None:
    """How the engine ended: its code (negative: the signal that killed it), None if unknown.

    The wrapper's file holds the engine's own status; if the wrapper died before writing it, the
    parent's waitpid still knows how the wrapper itself ended.
    """
    recorded = read_exit_file(exit_path)
    if recorded is not None:
        return recorded
    return reap(pid)


# ---------------------------------------------------------------- stopping


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _wait_group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        reap(pgid)
        if not group_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def _group_is_ours(pgid: int, marker: str) -> bool:
    """The group still holds our processes (and not a stranger that got the same number).

    The system gives no new process a pid equal to a live group's id. So a group whose leader is
    gone holds only what our wrapper left behind; a group with a live leader is ours if the
    leader is our wrapper.
    """
    members = group_members(pgid)
    if not members:
        return False
    if pgid in members:
        return is_alive(pgid, marker)
    return True


def stop(pid: int, *, exit_path: Path | None = None, timeout_s: float = 10.0) -> int | None:
    """SIGTERM to the copy's process group, SIGKILL after timeout_s; every member is gone after.

    Returns the engine's exit code when known. If the group had to be killed, the wrapper died
    with it and wrote nothing, so the file is written here: killed by SIGKILL.
    """
    marker = str(exit_path) if exit_path else ""
    if _group_is_ours(pid, marker):
        _signal_group(pid, signal.SIGTERM)
        if not _wait_group_gone(pid, timeout_s):
            _signal_group(pid, signal.SIGKILL)
            _wait_group_gone(pid, 5.0)
            if exit_path is not None and read_exit_file(exit_path) is None:
                write_exit_file(exit_path, -signal.SIGKILL)
    reap(pid)
    return exit_code(pid, exit_path) if exit_path else reap(pid)


# ---------------------------------------------------------------- reading the log


def read_log(path: Path, offset: int = 0) -> tuple[list[str], int]:
    """Complete lines written after offset, and the offset to read from next time.

    A line still being written (no newline yet) is left for the next read. A carriage return
    redraws a line (tqdm), so only what follows the last one is kept. A log shorter than offset
    was started afresh: it is read from the beginning.
    """
    try:
        with open(path, "rb") as log:
            size = os.fstat(log.fileno()).st_size
            if offset > size:
                offset = 0
            log.seek(offset)
            data = log.read(max(0, size - offset))
    except FileNotFoundError:
        return [], 0
    end = data.rfind(b"\n") + 1
    if end == 0 and len(data) > MAX_PARTIAL_LINE:
        end = len(data)
    if end == 0:
        return [], offset
    lines = [_last_redraw(raw) for raw in data[:end].split(b"\n")]
    if lines and data[:end].endswith(b"\n"):
        lines.pop()  # the empty piece after the last newline
    return lines, offset + end


def _last_redraw(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    return text.rsplit("\r", 1)[-1]


def read_tail(path: Path, max_bytes: int = 64 * 1024) -> list[str]:
    """The last lines of a log (whole lines only), for an exit message."""
    try:
        with open(path, "rb") as log:
            size = os.fstat(log.fileno()).st_size
            log.seek(max(0, size - max_bytes))
            data = log.read()
    except FileNotFoundError:
        return []
    if size > max_bytes:
        data = data[data.find(b"\n") + 1 :]
    return [_last_redraw(raw) for raw in data.split(b"\n") if raw.strip()]


# ---------------------------------------------------------------- the wrapper itself


def _keep_waiting(signum: int, frame: object) -> None:
    """The group's SIGTERM reached the engine too; the wrapper stays to record its exit."""


def wrap(exit_path: Path, argv: list[str], user: tuple[int, int] | None = None) -> int:
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _keep_waiting)  # a handler, not SIG_IGN: the child must not inherit
    identity = {"user": user[0], "group": user[1], "extra_groups": []} if user else {}
    try:
        # Same cwd, environment, output and process group; as the engine user when given one.
        child = subprocess.Popen(argv, **identity)  # type: ignore[call-overload]
    except OSError as error:
        print(f"berth supervisor: cannot start {argv[0]!r}: {error}", file=sys.stderr, flush=True)
        code = 127
    else:
        code = child.wait()  # PEP 475: a signal does not interrupt the wait
    write_exit_file(exit_path, code)
    return code if code >= 0 else 128 - code


def parse_user(text: str) -> tuple[int, int]:
    uid, _, gid = text.partition(":")
    return int(uid), int(gid)


def main(args: list[str]) -> int:
    usage = "usage: supervisor.py wrap EXIT_FILE [--as UID:GID] -- PROGRAM [ARGS…]"
    if len(args) >= 4 and args[0] == "wrap" and args[2] == "--as":
        user, args = parse_user(args[3]), args[:2] + args[4:]
    else:
        user = None
    if len(args) < 4 or args[0] != "wrap" or args[2] != "--":
        print(usage, file=sys.stderr)
        return 2
    return wrap(Path(args[1]), args[3:], user)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
