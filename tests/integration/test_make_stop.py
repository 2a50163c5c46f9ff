"""`make stop` (`python -m console.services stop`) stops what the quickstart started and says
what: here the engines of a simulator cluster, which outlive the console on purpose (Ctrl-C on
`make run` must leave them serving), and which nothing else would stop while it is down."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusters.backends import supervisor
from clusters.backends.simulator import SimulatorBackend
from console.demo import DEMO_MACHINES
from tests.integration.test_embedded_services import INHERITED_SECRETS
from tests.integration.test_simulator_backend import FAST, copy_spec, wait_until

pytestmark = pytest.mark.timeout(90)
ROOT = Path(__file__).resolve().parents[2]


def make_stop(tmp_path: Path) -> str:
    """As a user runs it, with a var/ of its own (no embedded servers there to stop)."""
    env = {k: v for k, v in os.environ.items() if k not in INHERITED_SECRETS}
    env |= {"BERTH_VAR_DIR": str(tmp_path / "var"), "BERTH_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run(
        [sys.executable, "-m", "console.services", "stop"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_stop_stops_every_engine_of_every_local_cluster_and_names_each(tmp_path):
    clusters = [
        SimulatorBackend({"machines": DEMO_MACHINES}, tmp_path / "state" / name, stop_timeout_s=5)
        for name in ("cluster-1", "cluster-2")
    ]
    handles = [
        backend.launch(copy_spec(copy_id, "h100-1", env=FAST, deployment_name=name))
        for backend, copy_id, name in ((clusters[0], 7, "qwen"), (clusters[1], 9, "llama"))
    ]
    try:
        for backend, handle in zip(clusters, handles, strict=True):
            wait_until(lambda b=backend, h=handle: b.is_running(h), what="the engines to run")
        printed = make_stop(tmp_path)
        assert f"Stopped the engine of qwen, copy 7 (pid {handles[0].pid})" in printed
        assert f"Stopped the engine of llama, copy 9 (pid {handles[1].pid})" in printed
        for backend, handle in zip(clusters, handles, strict=True):
            assert not backend.is_running(handle)
            assert supervisor.group_members(handle.pid) == []  # the engine's children too
        assert make_stop(tmp_path) == "Nothing of Berth's was running.\n"
    finally:
        for backend, handle in zip(clusters, handles, strict=True):
            backend.stop(handle)


def test_a_console_pid_file_that_names_another_program_or_nothing_is_left_alone(tmp_path):
    """A pid the system gave to another program since (or a garbled file) is never signalled."""
    var = tmp_path / "var"
    var.mkdir()
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for content in (f"{stranger.pid}\n", "not a pid\n", ""):
            (var / "console.pid").write_text(content)
            assert make_stop(tmp_path) == "Nothing of Berth's was running.\n"
            assert stranger.poll() is None
            assert not (var / "console.pid").exists()
    finally:
        stranger.kill()
        stranger.wait()
