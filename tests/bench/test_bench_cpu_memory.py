"""Estimate truth on a CPU machine: the whole memory (PSS) of vLLM's CPU build serving a copy,
against the budget Berth reserved for it. The budget must hold, or the engines would eat the
memory of the console's own database on the same machine.

The copy is hosted as the launcher hosts it (placement's reservation, the launcher's argv and
environment, the standalone backend) and measured once it serves. The figure is a ratio in the
same run; the target is within ±5 % of the budget. Smoke size (the tiny Llama) in `make test`.
"""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

import pytest

from catalog.models import Model
from clusters.backends import supervisor
from clusters.registry import backend_for
from deployments import launching, placing
from deployments.models import Copy
from tests import factories
from tests.conformance.harness import KEY
from tests.real_engines import local_cluster, tiny_model

pytestmark = [pytest.mark.bench, pytest.mark.django_db, pytest.mark.timeout(400)]
GIB = 1 << 30


def pss_bytes(pgid: int) -> int:
    """The proportional set size of every live process of the engine's group."""
    total = 0
    for pid in supervisor.group_members(pgid):
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        total += sum(
            int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")
        )
    return total * 1024


def test_the_cpu_builds_whole_memory_is_its_budget(tmp_path, settings, capsys):
    settings.STATE_DIR = tmp_path / "state"
    tiny_model(tmp_path / "models", settings)
    cluster = local_cluster()
    model = Model.objects.get(repo_id="berth/tiny-llama")
    deployment = factories.make_deployment(
        "tiny-memory",
        factories.make_team("red"),
        cluster=cluster,
        model=model,
        accelerators_per_copy=Decimal("0.25"),
        engine_settings={"max_model_len": 512, "enforce_eager": True},
    )
    deployment.variant = model.variants.get(name="safetensors")  # vLLM, not llama.cpp
    deployment.save(update_fields=["variant"])
    copy = factories.make_copy(deployment)
    placing.reserve(deployment, [copy])
    copy = Copy.objects.select_related("deployment__cluster", "machine").get(pk=copy.pk)
    backend = backend_for(cluster)
    port = supervisor.free_port()
    handle = backend.launch(launching.spec_for(copy, port, KEY))
    try:
        wait_ready(backend, handle)
        used = pss_bytes(int(handle.pid or 0))
    finally:
        backend.stop(handle)
    budget = copy.allocated_bytes
    ratio = used / budget
    with capsys.disabled():
        print(
            f"\nvLLM CPU build, tiny Llama, 0.25 of this machine: budget {budget / GIB:.2f} GiB, "
            f"engine PSS {used / GIB:.2f} GiB, ratio {ratio:.3f} (target 0.95..1.05)"
        )
    assert 0.95 <= ratio <= 1.05


def wait_ready(backend, handle) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        seen = backend.observe_one(handle)
        if seen.status == "ready":
            return
        assert seen.status == "starting", seen.message
        time.sleep(1)
    raise AssertionError("the engine did not serve within 300 s")
