"""The process supervisor and the standalone backend, with real processes.

Small Python children stand in for engines (one forks a grandchild, one ignores SIGTERM); the
standalone backend runs the engine simulator. Re-adoption is tested the hard way too: a separate
"console" process starts an engine and exits, and this process finds, observes and stops it.
Every test kills what it started, and every wait is bounded.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pynvml
import pytest

from clusters.backends import supervisor
from clusters.backends.base import BackendError, CopyHandle, CopySpec, ModelFiles
from clusters.backends.logparse import LineState, parse_lines
from clusters.backends.standalone import StandaloneBackend, WaitForRoom
from clusters.simulator import build_env, serve_argv

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
GIB = 1 << 30
FAST = build_env(load_s_per_gb=0.02, init_s=0.05)
# A child that forks a grandchild (same process group), says both pids, then waits.
PARENT_OF_ONE = textwrap.dedent(
    """
    import subprocess, sys, time
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print(f"child {__import__('os').getpid()} grandchild {grandchild.pid}", flush=True)
    time.sleep(60)
    """
)
STUBBORN = textwrap.dedent(
    """
    import signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ignoring SIGTERM", flush=True)
    time.sleep(60)
    """
)


def wait_until(condition: Callable[[], object], timeout: float = 10.0, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}")


@pytest.fixture
def started() -> Iterator[list[int]]:
    """Process group ids started by a test; each group is killed afterwards, whatever happened."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        supervisor.stop(pgid, timeout_s=1.0)


def start(started: list[int], tmp_path: Path, *argv: str, name: str = "copy") -> int:
    pid = supervisor.start(
        list(argv),
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        log_path=tmp_path / name / "engine.log",
        exit_path=tmp_path / name / "exit",
    )
    started.append(pid)
    return pid


def log_text(tmp_path: Path, name: str = "copy") -> str:
    lines, _ = supervisor.read_log(tmp_path / name / "engine.log")
    return "\n".join(lines)


# ---------------------------------------------------------------- the supervisor


def test_a_child_and_its_grandchild_are_watched_logged_and_stopped(
    started: list[int], tmp_path: Path
) -> None:
    pid = start(started, tmp_path, sys.executable, "-c", PARENT_OF_ONE)
    assert os.getpgid(pid) == pid == os.getsid(pid)  # its own session and process group
    line = wait_until(lambda: log_text(tmp_path), what="the child's line")
    _, child, _, grandchild = str(line).split()
    assert supervisor.is_alive(pid, marker=str(tmp_path / "copy" / "exit"))
    assert supervisor.is_alive(int(child)) and supervisor.is_alive(int(grandchild))
    assert sorted(supervisor.group_members(pid)) == sorted([pid, int(child), int(grandchild)])

    code = supervisor.stop(pid, exit_path=tmp_path / "copy" / "exit", timeout_s=5.0)

    assert code == -15  # the child died of the group's SIGTERM; the wrapper wrote it down
    assert not any(supervisor.is_alive(p) for p in (pid, int(child), int(grandchild)))
    assert supervisor.group_members(pid) == []


def test_a_child_that_ignores_sigterm_is_killed_after_the_timeout(
    started: list[int], tmp_path: Path
) -> None:
    pid = start(started, tmp_path, sys.executable, "-c", STUBBORN)
    wait_until(lambda: "ignoring SIGTERM" in log_text(tmp_path), what="the child's line")
    began = time.monotonic()
    code = supervisor.stop(pid, exit_path=tmp_path / "copy" / "exit", timeout_s=0.5)
    assert 0.4 < time.monotonic() - began < 5
    assert code == -9
    assert supervisor.read_exit_file(tmp_path / "copy" / "exit") == -9
    assert supervisor.group_members(pid) == []


def test_the_exit_code_is_known_to_the_parent_and_from_the_exit_file(
    started: list[int], tmp_path: Path
) -> None:
    pid = start(started, tmp_path, sys.executable, "-c", "import sys; sys.exit(3)")
    exit_path = tmp_path / "copy" / "exit"
    wait_until(lambda: not supervisor.is_alive(pid), what="the child to end")
    assert supervisor.reap(pid) == 3  # waitpid, as the parent
    assert supervisor.exit_code(pid, exit_path) == 3
    assert supervisor.read_exit_file(exit_path) == 3  # what a restarted console reads


def test_shell_metacharacters_reach_the_program_literally(
    started: list[int], tmp_path: Path
) -> None:
    tricky = ["a; touch pwned", "$(touch pwned)", "`touch pwned`", "| cat", "> out", "*", "'\""]
    code = "import json, sys; print(json.dumps(sys.argv[1:]), flush=True)"
    pid = start(started, tmp_path, sys.executable, "-c", code, *tricky)
    wait_until(lambda: not supervisor.is_alive(pid), what="the child to end")
    assert json.loads(log_text(tmp_path)) == tricky
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [["sh", "-c", "vllm serve x"], ["vllm serve x --port 8000"], [], "vllm serve x"],
)
def test_shells_and_command_strings_are_refused(tmp_path: Path, argv: object) -> None:
    with pytest.raises(supervisor.SupervisorError):
        supervisor.start(
            argv,  # type: ignore[arg-type]
            cwd=tmp_path,
            env=dict(os.environ),
            log_path=tmp_path / "log",
            exit_path=tmp_path / "exit",
        )


def test_a_program_that_is_not_installed_is_refused_in_words(tmp_path: Path) -> None:
    with pytest.raises(supervisor.SupervisorError, match="not installed on this machine"):
        supervisor.start(
            ["no-such-engine-xyz", "serve"],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            log_path=tmp_path / "log",
            exit_path=tmp_path / "exit",
        )


def test_a_pid_given_to_another_process_is_not_ours(started: list[int], tmp_path: Path) -> None:
    pid = start(started, tmp_path, sys.executable, "-c", "import time; time.sleep(30)")
    assert supervisor.is_alive(pid, marker=str(tmp_path / "copy" / "exit"))
    assert not supervisor.is_alive(pid, marker=str(tmp_path / "another-copy" / "exit"))
    assert supervisor.stop(pid, exit_path=tmp_path / "other" / "exit", timeout_s=1) is None
    assert supervisor.is_alive(pid)  # a stop aimed at someone else's process does nothing


def test_the_log_is_read_in_whole_lines_from_an_offset(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(b"first\nsecond\nthi")
    lines, offset = supervisor.read_log(log, 0)
    assert (lines, offset) == (["first", "second"], len(b"first\nsecond\n"))
    with open(log, "ab") as handle:
        handle.write(b"rd\nLoading: 10%\rLoading: 100%\n")
    lines, offset = supervisor.read_log(log, offset)
    assert lines == ["third", "Loading: 100%"]
    assert supervisor.read_log(log, offset) == ([], offset)
    log.write_bytes(b"new run\n")  # the copy was started again: the log starts afresh
    assert supervisor.read_log(log, offset) == (["new run"], len(b"new run\n"))


def test_free_port_is_free() -> None:
    port = supervisor.free_port()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))


# ---------------------------------------------------------------- re-adoption after a restart

CONSOLE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from clusters.backends import supervisor
    folder = Path(sys.argv[1])
    pid = supervisor.start(
        [sys.executable, "-c", sys.argv[2]], cwd=folder, env={"PATH": "/usr/bin:/bin"},
        log_path=folder / "engine.log", exit_path=folder / "exit",
    )
    print(json.dumps({"pid": pid}))
    """
)


def start_from_another_console(tmp_path: Path, code: str) -> int:
    """A console process starts an engine and exits: this process is not the engine's parent."""
    done = subprocess.run(
        [sys.executable, "-c", CONSOLE, str(tmp_path), code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    return int(json.loads(done.stdout)["pid"])


def test_a_restarted_console_reads_the_exit_code_from_the_file(tmp_path: Path) -> None:
    pid = start_from_another_console(tmp_path, "import time, sys; time.sleep(0.5); sys.exit(7)")
    try:
        assert supervisor.reap(pid) is None  # not our child: no waitpid here
        wait_until(lambda: not supervisor.is_alive(pid), what="the adopted engine to end")
        wait_until(lambda: supervisor.exit_code(pid, tmp_path / "exit") is not None)
        assert supervisor.exit_code(pid, tmp_path / "exit") == 7
    finally:
        supervisor.stop(pid, timeout_s=1)


def test_a_restarted_console_stops_an_engine_it_did_not_start(tmp_path: Path) -> None:
    pid = start_from_another_console(tmp_path, PARENT_OF_ONE)
    try:
        line = wait_until(lambda: supervisor.read_log(tmp_path / "engine.log")[0], what="a line")
        grandchild = int(line[0].split()[-1])  # type: ignore[index]
        assert supervisor.is_alive(pid, marker=str(tmp_path / "exit"))
        assert supervisor.stop(pid, exit_path=tmp_path / "exit", timeout_s=5) == -15
        assert not supervisor.is_alive(pid) and not supervisor.is_alive(grandchild)
    finally:
        supervisor.stop(pid, timeout_s=1)


# ---------------------------------------------------------------- the standalone backend


class FreeMemoryNvml:
    """Just enough NVML for the free-memory check: GPU 0 has `free` bytes free of 80 GiB."""

    NVMLError = pynvml.NVMLError

    def __init__(self, free: int) -> None:
        self.free = free

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:
        return type("Memory", (), {"total": 80 * GIB, "free": self.free, "used": 0})()


def engine_spec(copy_id: int, port: int, **changes: object) -> CopySpec:
    fields: dict[str, object] = {
        "copy_id": copy_id,
        "deployment_name": "qwen",
        "ordinal": 0,
        "argv": tuple(
            serve_argv(
                "Qwen/Qwen3-0.6B",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--api-key",
                "sk-standalone",
            )
        ),  # fmt: skip
        "env": {"PYTHONPATH": str(REPO), **FAST},
        "machine": "this-machine",
        "port": port,
    }
    fields.update(changes)
    return CopySpec(**fields)  # type: ignore[arg-type]


@pytest.fixture
def backends(tmp_path: Path) -> Iterator[list[tuple[StandaloneBackend, CopyHandle]]]:
    """(backend, handle) pairs launched by a test; all are stopped afterwards."""
    launched: list[tuple[StandaloneBackend, CopyHandle]] = []
    yield launched
    for backend, handle in launched:
        backend.stop(handle)


def test_standalone_launches_observes_and_a_new_instance_re_adopts_the_copy(
    tmp_path: Path, backends: list[tuple[StandaloneBackend, CopyHandle]]
) -> None:
    first = StandaloneBackend(tmp_path / "state", "this-machine", stop_timeout_s=5)
    port = supervisor.free_port()
    handle = first.launch(engine_spec(1, port))
    backends.append((first, handle))
    assert (handle.pid, handle.port, handle.machine) == (handle.pid, port, "this-machine")
    assert first.launch(engine_spec(1, port)) == handle  # launching it again is harmless
    wait_until(lambda: first.observe([handle])[0].status == "ready", 20, "the engine to serve")

    restarted = StandaloneBackend(tmp_path / "state", "this-machine", stop_timeout_s=5)
    (seen,) = restarted.observe([handle])
    assert (seen.status, seen.pid, seen.port) == ("ready", handle.pid, port)
    texts = [record.text for record in restarted.logs(handle, None)]
    assert any("Application startup complete." in text for text in texts)
    restarted.stop(handle)

    (seen,) = restarted.observe([handle])
    assert (seen.status, seen.exit_code, seen.reason) == ("exited", 0, "Completed")
    assert first.observe([handle])[0].exit_code == 0
    assert supervisor.group_members(handle.pid) == []  # type: ignore[arg-type]


def test_standalone_reports_how_an_engine_died(
    tmp_path: Path, backends: list[tuple[StandaloneBackend, CopyHandle]]
) -> None:
    backend = StandaloneBackend(tmp_path / "state", "this-machine")
    env = {"PYTHONPATH": str(REPO), **FAST, **build_env(oom_at_load=True)}
    handle = backend.launch(engine_spec(2, supervisor.free_port(), env=env))
    backends.append((backend, handle))
    wait_until(lambda: backend.observe([handle])[0].status == "exited", 20, "the engine to fail")
    (seen,) = StandaloneBackend(tmp_path / "state", "this-machine").observe([handle])
    assert (seen.exit_code, seen.reason) == (1, "Error")
    assert seen.message.startswith("the engine exited with code 1: torch.OutOfMemoryError: CUDA")


def test_a_shared_gpu_without_room_makes_the_copy_wait(tmp_path: Path) -> None:
    backend = StandaloneBackend(tmp_path / "state", "gpu-box", nvml_module=FreeMemoryNvml(6 * GIB))
    spec = engine_spec(
        3, supervisor.free_port(), gpu_indexes=(0,), memory_share=0.25, reserved_bytes=20 * GIB
    )
    with pytest.raises(WaitForRoom) as waiting:
        backend.launch(spec)
    assert str(waiting.value) == (
        "6.00 GiB free on GPU 0, the copy needs 20.00 GiB; it waits until memory frees up"
    )
    assert not backend.copy_dir(3).exists()  # nothing was started


def test_the_engine_gets_its_gpus_and_no_secrets_of_the_console(
    tmp_path: Path, backends: list[tuple[StandaloneBackend, CopyHandle]], monkeypatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://secret@db/berth")
    backend = StandaloneBackend(tmp_path / "state", "gpu-box", nvml_module=FreeMemoryNvml(80 * GIB))
    code = "import json, os; print(json.dumps(dict(os.environ)), flush=True)"
    port = supervisor.free_port()
    argv = (sys.executable, "-c", code, "--host", "127.0.0.1", "--port", str(port))
    spec = engine_spec(4, port, argv=argv, env={"HF_TOKEN": "hf_x"}, gpu_indexes=(2, 3))
    handle = backend.launch(spec)
    backends.append((backend, handle))
    wait_until(lambda: backend.observe([handle])[0].status == "exited", 10, "the child to end")
    env = json.loads(backend.logs(handle, None)[0].text)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["HF_TOKEN"] == "hf_x" and "DATABASE_URL" not in env


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("vllm", "serve", "m", "--port", "8000"), "127.0.0.1 only"),
        (("vllm", "serve", "m", "--host", "0.0.0.0", "--port", "8000"), "127.0.0.1 only"),
        (("vllm serve m --host 127.0.0.1 --port 8000",), "shell command line"),
        (("bash", "-c", "vllm serve m --host 127.0.0.1 --port 8000"), "through a shell"),
        (("vllm", "serve", "m", "--host", "127.0.0.1", "--port", "9"), "has port 8000"),
    ],
)
def test_launch_refuses_an_argv_it_should_not_run(
    tmp_path: Path, argv: tuple[str, ...], words: str
) -> None:
    backend = StandaloneBackend(tmp_path / "state", "this-machine")
    with pytest.raises(BackendError, match=words):
        backend.launch(engine_spec(5, 8000, argv=argv))


def test_prepare_files_lists_what_is_missing(tmp_path: Path) -> None:
    backend = StandaloneBackend(tmp_path / "state", "this-machine")
    model = tmp_path / "models" / "qwen"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    names = ("config.json", "model.safetensors", "tokenizer.json")
    files = ModelFiles(
        "Qwen/Qwen3-0.6B", "abc", "bf16", str(model), 10, tuple((n, 2) for n in names)
    )
    result = backend.prepare_files("this-machine", files)
    assert (result.present, result.missing) == (False, ("model.safetensors", "tokenizer.json"))
    (model / "model.safetensors").write_bytes(b"")
    (model / "tokenizer.json").write_text("{}")
    seen: list[int] = []
    result = backend.prepare_files("this-machine", files, seen.append)
    assert result.present and result.missing == () and seen == [10]
    absent = backend.files_here("this-machine", replace(files, source_path=str(tmp_path / "no")))
    assert not absent.present and "does not exist" in absent.message
    not_kept = backend.files_here("this-machine", replace(files, source_path=""))
    assert not not_kept.present and "keeps no copy" in not_kept.message
    assert "is not this machine" in backend.files_here("elsewhere", files).message


# ---------------------------------------------------------------- reading vLLM's lines


def test_vllm_lines_are_read_with_their_level_and_time() -> None:
    start = datetime(2026, 11, 29, 14, 59, 59).astimezone()
    lines = [
        "\x1b[1;36m(APIServer pid=41)\x1b[0;0m INFO 11-29 15:00:00 [api_server.py:1839] vLLM API",
        "(EngineCore_DP0 pid=42) WARNING 11-29 15:00:01 [utils.py:1] slow",
        "ERROR 11-29 15:00:02 core.py:708] EngineCore failed to start.",  # older vLLM format
        "Traceback (most recent call last):",
        '  File "/usr/lib/vllm/core.py", line 699, in run_engine_core',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB.",
        "(APIServer pid=41) INFO:     Application startup complete.",
        "Loading safetensors checkpoint shards: 100% Completed | 4/4",
    ]
    parsed, _ = parse_lines(lines, LineState(last_at=start))
    assert [line.level for line in parsed] == [
        "INFO", "WARNING", "ERROR", "ERROR", "ERROR", "ERROR", "INFO", "INFO",
    ]  # fmt: skip
    assert parsed[0].text.startswith("(APIServer pid=41) INFO 11-29 15:00:00")  # no colours
    assert parsed[1].at == datetime(2026, 11, 29, 15, 0, 1).astimezone()
    assert all(a.at < b.at for a, b in zip(parsed, parsed[1:], strict=False))


def test_the_backends_import_no_django_and_standalone_needs_only_nvml() -> None:
    code = (
        "import sys, clusters.backends.standalone, clusters.backends.nvml;"
        "heavy = {'django', 'httpx', 'aiohttp', 'prometheus_client', 'psutil'};"
        "assert not heavy & {m.split('.')[0] for m in sys.modules}, heavy & set(sys.modules);"
        "import clusters.backends.simulator;"
        "assert 'django' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=20)
