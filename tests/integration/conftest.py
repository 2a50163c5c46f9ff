"""Fixtures of the integration tests that drive a whole running console from outside."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from berth_sdk import BerthClient
from django.core.management import call_command

from catalog.models import Model
from console.models import ApiKey
from tests.integration.test_lifecycle import on_this_server, simulated_cluster
from tests.processes import console_processes, console_server, gateway_server, stop_engines

QWEN = "Qwen/Qwen3-0.6B"


@dataclass(frozen=True)
class Console:
    url: str
    key: str  # an operate key of bob, operator of team red
    gateway: str

    def client(self, **options: object) -> BerthClient:
        return BerthClient(base_url=self.url, api_key=self.key, **options)  # type: ignore[arg-type]


@dataclass(frozen=True)
class RunningConsole:
    """The processes of a console, and where they keep their engines' folders."""

    state_dir: Path
    url: str
    gateway: str


@pytest.fixture(scope="module")
def running_console(
    tmp_path_factory, django_db_setup, django_db_blocker
) -> Iterator[RunningConsole]:
    """Web, worker, beat, watcher and gateway on the test database, started once for a module:
    its tests bring their own rows (each test's database is emptied after it), and the
    processes find them as they find an operator's."""
    state_dir = tmp_path_factory.mktemp("console")
    with (
        django_db_blocker.unblock(),  # the modules that use it are all database tests
        console_processes(state_dir),
        gateway_server(BERTH_GATEWAY_REFRESH_S="0.2") as gateway,
        console_server(BERTH_GATEWAY_URL=f"{gateway}/v1") as url,
    ):
        yield RunningConsole(state_dir, url, gateway)


@pytest.fixture
def berth_console(running_console, bob) -> Iterator[Console]:
    """The running console as a client sees it: on the simulated cluster `sdk` a copy of
    Qwen3-0.6B (on this server already) has room; on `stuck` every engine hangs while loading."""
    call_command("load_catalog")
    simulated_cluster("sdk", gpus=2)
    simulated_cluster("stuck", gpus=1, BERTH_SIM_HANG_AT_START="1")
    on_this_server(Model.objects.get(repo_id=QWEN).variants.get(name="bf16"))
    key = ApiKey.issue(bob, "sdk tests")[1]
    try:
        yield Console(running_console.url, key, running_console.gateway)
    finally:  # before this test's rows go: the next test's console has no engine of this one's
        stop_engines(running_console.state_dir)


# --- a real Ray cluster -----------------------------------------------------------------

H100_NODE = {"num_cpus": 1, "num_gpus": 2, "resources": {"accelerator_type:H100": 1},
             "labels": {"zone": "a"}}  # fmt: skip
A100_NODE = {"num_cpus": 1, "num_gpus": 4, "resources": {"accelerator_type:A100": 1}}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RayUnderTest:
    def __init__(self, cluster: Any, dashboard: str, a100: object) -> None:
        self.cluster, self.dashboard, self.a100 = cluster, dashboard, a100
        self.address: str = cluster.address  # the head's, as ray.init takes it


@contextmanager
def ray_temp_dir() -> Iterator[str]:
    """A short folder for a Ray cluster's files: its Unix sockets' paths, under it, may not
    exceed 107 bytes (a folder of pytest's, deep under /tmp/pytest-of-<user>, can be too long)."""
    # Ray notes the newest cluster's address in its default folder whatever temp_dir says, and
    # creates that folder only when it is the temp_dir: on a fresh machine it is not there.
    Path(tempfile.gettempdir(), "ray").mkdir(exist_ok=True)
    folder = tempfile.mkdtemp(prefix="ray-", dir=tempfile.gettempdir())
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayUnderTest]:
    """A head (no GPUs, the dashboard) and two GPU nodes; started once for this module."""
    from ray.cluster_utils import Cluster as LocalRay

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    port = free_port()
    with ray_temp_dir() as temp_dir:
        head = {"num_cpus": 1, "include_dashboard": True, "dashboard_port": port,
                "temp_dir": temp_dir}  # fmt: skip
        local = LocalRay(initialize_head=True, head_node_args=head)
        try:
            local.add_node(**H100_NODE)
            a100 = local.add_node(**A100_NODE)
            local.wait_for_nodes()
            yield RayUnderTest(local, f"http://127.0.0.1:{port}", a100)
        finally:
            local.shutdown()
