"""Estimate truth on a CPU machine: the whole memory (PSS) of a real engine serving a copy,
against the budget Berth reserved for it. The budget must hold, or the engines would eat the
memory of the console's own database on the same machine.

The copy is hosted as the launcher hosts it (placement's reservation, the launcher's argv and
environment, the standalone backend) and measured once it serves, and while it starts.
vLLM's CPU build is given its budget's KV cache to the byte: once ready it must fill the budget
less the room for one full step's activations (which only load takes on the CPU build), never
above it and leaving at most 0.5 GiB of it unused, on any install (its runtime measured 1.31 to
1.53 GiB on three). llama.cpp's server takes the KV cache of its context only: it must stay
within its estimate, which may exceed it by no more than its bounded prompt cache (256 MiB,
empty when idle) and 64 MiB. Figures are printed as ratios from the same run.
Smoke size (the tiny Llama) in `make test`; `make bench` adds a Llama of Qwen3-0.6B's shape at
512 tokens of context (random weights from the same generator, 0.6 B parameters), where the
weights are most of the budget.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

import placement
from catalog.adding import add_from_path
from catalog.models import Model, Variant
from catalog.tiny_model import QWEN3_0_6B, write_tiny_model
from clusters.backends import supervisor
from clusters.registry import backend_for
from deployments import launching, placing
from deployments.models import Copy
from tests import factories
from tests.conformance.harness import KEY
from tests.real_engines import engine_readable_folder, local_cluster, tiny_model

pytestmark = [pytest.mark.bench, pytest.mark.django_db, pytest.mark.timeout(400)]
GIB = 1 << 30
MIB = 1 << 20
FULL = os.environ.get("BERTH_BENCH_FULL") == "1"
# (model, share of this machine): Qwen3-0.6B's shape needs about 4 GiB (2.2 GiB of weights).
MODELS = [("tiny Llama", "0.25")] + ([("Qwen3-0.6B's shape", "0.35")] if FULL else [])


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


def vllm_variant(name: str, tmp_path: Path, settings) -> Variant:
    """The model's safetensors variant, catalogued as on this server (the GGUF is llama.cpp's)."""
    if name == "tiny Llama":
        return tiny_variant("safetensors", tmp_path, settings)
    folder = tmp_path / "models" / "qwen3-0.6b-shape"
    write_tiny_model(folder, QWEN3_0_6B)
    model = add_from_path(str(folder), "berth/qwen3-0.6b-shape", None)
    return model.variants.get(engine="vllm")


def tiny_variant(name: str, tmp_path: Path, settings) -> Variant:
    tiny_model(tmp_path / "models", settings)
    return Model.objects.get(repo_id="berth/tiny-llama").variants.get(name=name)


@pytest.fixture
def models_home() -> Iterator[Path]:
    with engine_readable_folder() as folder:
        yield folder


@pytest.mark.parametrize(("name", "share"), MODELS)
def test_the_cpu_builds_whole_memory_is_its_budget(
    name, share, tmp_path, models_home, settings, capsys
):
    settings.STATE_DIR = tmp_path / "state"
    variant = vllm_variant(name, models_home, settings)
    deployment = deployment_of(variant, share, {"max_model_len": 512, "enforce_eager": True})
    budget, estimate, peak, ready = serve_and_measure(deployment)
    # The CPU build runs no profiling step: the activations' room is taken only by a full step
    # of tokens under load, so an idle engine fills its budget less that room.
    idle_budget = budget - estimate.activations_bytes
    with capsys.disabled():
        print(
            f"\nvLLM CPU build, {name}, {share} of this machine: budget {budget / GIB:.2f} GiB "
            f"({estimate.activations_bytes / GIB:.2f} GiB of it for a full step's activations); "
            f"engine PSS once ready {ready / GIB:.2f} GiB: ratio {ready / idle_budget:.3f} to the "
            f"budget less the activations, {ready / budget:.3f} to the whole, "
            f"{(idle_budget - ready) / GIB:.2f} GiB unused (at most 0.50); highest while "
            f"starting {peak / GIB:.2f} GiB"
        )
    assert ready <= idle_budget + 0.05 * GIB  # the activations' room covers a little more
    assert idle_budget - ready <= 0.5 * GIB
    assert peak <= budget


def test_llama_cpps_whole_memory_is_within_its_estimate(tmp_path, models_home, settings, capsys):
    settings.STATE_DIR = tmp_path / "state"
    variant = tiny_variant("gguf", models_home, settings)
    deployment = deployment_of(variant, "0.25", {"max_model_len": 512})
    _budget, estimate, peak, ready = serve_and_measure(deployment)
    total = estimate.total_bytes
    with capsys.disabled():
        print(
            f"\nllama.cpp's server, tiny Llama, 512 tokens: estimate {total / MIB:.1f} MiB "
            f"(overhead {estimate.overhead_bytes / MIB:.1f} MiB, of it 256 for the prompt "
            f"cache); engine PSS once ready {ready / MIB:.1f} MiB: ratio {ready / total:.3f}, "
            f"{ready / (total - 256 * MIB):.3f} to the estimate less the prompt cache; highest "
            f"while starting {peak / MIB:.1f} MiB"
        )
    assert peak <= total
    assert total - 256 * MIB - ready <= 64 * MIB


def deployment_of(variant: Variant, share: str, engine_settings: dict[str, object]):
    deployment = factories.make_deployment(
        "cpu-memory",
        factories.make_team("red"),
        cluster=local_cluster(),
        model=variant.model,
        accelerators_per_copy=Decimal(share),
        engine_settings=engine_settings,
    )
    deployment.variant = variant
    deployment.engine = variant.engine
    deployment.save(update_fields=["variant", "engine"])
    return deployment


def serve_and_measure(deployment) -> tuple[int, placement.Estimate, int, int]:
    """Host one copy as the launcher does: its budget, placement's estimate, and its engine's
    PSS at the highest seen while it started and once it serves."""
    copy = factories.make_copy(deployment)
    plan = placing.reserve(deployment, [copy])
    assert plan.placed, plan.not_placed
    copy = Copy.objects.select_related("deployment__cluster", "machine").get(pk=copy.pk)
    backend = backend_for(deployment.cluster)
    handle = backend.launch(launching.spec_for(copy, supervisor.free_port(), KEY))
    try:
        peak = wait_ready(backend, handle)
        ready = pss_bytes(int(handle.pid or 0))
    finally:
        backend.stop(handle)
    return copy.allocated_bytes, plan.estimate, max(peak, ready), ready


def wait_ready(backend, handle) -> int:
    """Wait until the engine serves; the highest PSS sampled on the way (every 0.2 s)."""
    deadline = time.monotonic() + 300
    peak = 0
    while time.monotonic() < deadline:
        seen = backend.observe_one(handle)
        if seen.status == "ready":
            return peak
        assert seen.status == "starting", seen.message
        peak = max(peak, pss_bytes(int(handle.pid or 0)))
        time.sleep(0.2)
    raise AssertionError("the engine did not serve within 300 s")
