"""Fixtures of the integration tests that drive a whole running console from outside."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from berth_sdk import BerthClient
from django.core.management import call_command

from catalog.models import Model
from console.models import ApiKey
from tests.integration.test_lifecycle import on_this_server, simulated_cluster
from tests.processes import console_processes, console_server, gateway_server

QWEN = "Qwen/Qwen3-0.6B"


@dataclass(frozen=True)
class Console:
    url: str
    key: str  # an operate key of bob, operator of team red
    gateway: str

    def client(self, **options: object) -> BerthClient:
        return BerthClient(base_url=self.url, api_key=self.key, **options)  # type: ignore[arg-type]


@pytest.fixture
def berth_console(tmp_path, bob) -> Iterator[Console]:
    """Web, worker, beat, watcher and gateway on the test database, as a client sees them:
    on the simulated cluster `sdk` a copy of Qwen3-0.6B (on this server already) has room; on
    `stuck` every engine hangs while loading."""
    call_command("load_catalog")
    simulated_cluster("sdk", gpus=2)
    simulated_cluster("stuck", gpus=1, BERTH_SIM_HANG_AT_START="1")
    on_this_server(Model.objects.get(repo_id=QWEN).variants.get(name="bf16"))
    key = ApiKey.issue(bob, "sdk tests")[1]
    with (
        console_processes(tmp_path),
        gateway_server(BERTH_GATEWAY_REFRESH_S="0.2") as gateway,
        console_server(BERTH_GATEWAY_URL=f"{gateway}/v1") as url,
    ):
        yield Console(url, key, gateway)
