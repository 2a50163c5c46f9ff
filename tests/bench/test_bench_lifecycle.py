"""Benchmark: Host → DEPLOYED on the simulator (load time 0) and one reconciler pass.

Run by `make bench` (full sizes: 1, 10 and 100 copies; 1,000 deployments) and, at a smoke size,
inside `make test`. Figures are printed with a baseline measured in the same run, since the
machines here are noisy: starting one engine simulator by hand, and reading the same rows with
one query each.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from catalog.models import Model
from clusters.backends.simulator import discover_inventory
from clusters.backends.supervisor import free_port
from clusters.inventory import apply_discovery
from clusters.models import Cluster
from deployments import actions, reconciler
from deployments.choices import DeploymentState
from deployments.models import Deployment, Event, LogLine
from tests import factories
from tests.integration.test_lifecycle import on_this_server
from tests.processes import console_processes, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.bench]
FULL = os.environ.get("BERTH_BENCH_FULL") == "1"
COPIES = [1, 10, 100] if FULL else [1]
DEPLOYMENTS = 1000 if FULL else 100
ZERO_LOAD = {"BERTH_SIM_LOAD_S_PER_GB": "0", "BERTH_SIM_INIT_S": "0"}
H100 = {
    "vendor": "nvidia",
    "product": "NVIDIA-H100-80GB-HBM3",
    "memory_mib": 81559,
    "compute_capability": "9.0",
}


def big_cluster(name: str, gpus: int) -> Cluster:
    machines = [
        {
            "name": f"{name}-{m}",
            "cpus": 64,
            "system_memory_gib": 1024,
            "accelerators": [{**H100, "index": i, "uuid": f"GPU-{name}-{m}-{i}"} for i in range(8)],
        }
        for m in range((gpus + 7) // 8)
    ]
    inventory = {"machines": machines, "engine_env": ZERO_LOAD}
    cluster = Cluster.objects.create(
        name=name, kind="simulator", sharing_strategy="fractional", simulated_inventory=inventory
    )
    apply_discovery(cluster, discover_inventory(inventory))
    return cluster


def one_engine_by_hand() -> float:
    """Baseline: start one engine simulator directly and wait for it to answer /health."""
    import urllib.request

    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "clusters.simulator.engine",
        "serve",
        "Qwen/Qwen3-0.6B",
        "--port",
        str(port),
        "--max-model-len",
        "4096",
    ]
    began = time.perf_counter()
    process = subprocess.Popen(
        argv, env={**os.environ, **ZERO_LOAD}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:

        def healthy() -> bool:
            try:
                return (
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).status
                    == 200
                )
            except OSError:
                return False

        wait_for(healthy, 60, every=0.05, what="the engine simulator")
        return time.perf_counter() - began
    finally:
        process.terminate()
        process.wait(10)


def timeline(deployment: Deployment, began_at: datetime) -> str:
    """Where the time went, step by step: each state change's Event (the first of each kind,
    for many copies the last too) and the engine's own lines, as seconds after Host."""
    steps: dict[str, list[datetime]] = {}
    for event in Event.objects.filter(deployment=deployment, to_state__gt="").order_by("at"):
        what = f"{'copy' if event.copy_id else 'deployment'} → {event.to_state}"
        steps.setdefault(what, []).append(event.at)
    for line in LogLine.objects.filter(deployment=deployment, stream="engine").order_by("at"):
        steps.setdefault(f"engine: {line.text[:48]}", []).append(line.at)
    rows = sorted(steps.items(), key=lambda item: item[1][0])
    return "\n".join(
        f"      {(ats[0] - began_at).total_seconds():7.3f} s"
        + (f" … {(ats[-1] - began_at).total_seconds():7.3f} s" if len(ats) > 1 else " " * 12)
        + f"  {what}"
        for what, ats in rows
    )


def host_until_deployed(bob, red, variant, cluster: Cluster, copies: int) -> float:
    """Host `copies` copies, wait for DEPLOYED, print where the time went, stop them."""
    request = actions.HostRequest(
        team=red,
        model=variant.model,
        variant=variant,
        cluster=cluster,
        name=cluster.name,
        copies=copies,
        engine_settings={"max_model_len": 4096},
    )
    began, began_at = time.perf_counter(), timezone.now()
    deployment = actions.host(bob, request)
    wait_for(
        lambda: Deployment.objects.get(pk=deployment.pk).state == DeploymentState.DEPLOYED,
        600,
        every=0.01,
        what=f"{copies} copies DEPLOYED",
    )
    seconds = time.perf_counter() - began
    print(f"\n  {copies:>4} copies: {seconds:7.2f} s to DEPLOYED", flush=True)
    print(timeline(deployment, began_at), flush=True)
    actions.stop(bob, Deployment.objects.get(pk=deployment.pk))
    wait_for(
        lambda: Deployment.objects.get(pk=deployment.pk).state == DeploymentState.STOPPED,
        600,
        what="stopped",
    )
    return seconds


@pytest.mark.timeout(1800)
def test_host_to_deployed(tmp_path, bob, red, capsys):
    call_command("load_catalog")
    variant = Model.objects.get(repo_id="Qwen/Qwen3-0.6B").variants.get(name="bf16")
    on_this_server(variant)
    baseline = one_engine_by_hand()
    # The clusters exist before the console starts, as an operator's do; the console runs with
    # its default intervals. A first host warms the processes up (imports, connections) and is
    # not counted: an operator's console has been running. Load time 0 covers the simulated
    # copy of the model's files to the machine too: the engine by hand copies nothing.
    warm_up = big_cluster("bench-warm-up", 1)
    clusters = {copies: big_cluster(f"bench-{copies}", copies) for copies in COPIES}
    rows = []
    instant_copy = {"BERTH_SIMULATOR_COPY_BYTES_PER_S": str(2**50)}
    with console_processes(tmp_path, **instant_copy), capsys.disabled():
        print("\nWarm-up (not counted):", end="")
        host_until_deployed(bob, red, variant, warm_up, 1)
        for copies, cluster in clusters.items():
            rows.append((copies, host_until_deployed(bob, red, variant, cluster, copies)))
    with capsys.disabled():
        print(
            f"\nHost → DEPLOYED (simulator, load time 0); baseline: one engine by hand {baseline:.2f} s"
        )
        for copies, seconds in rows:
            print(f"  {copies:>4} copies: {seconds:7.2f} s  = {seconds / baseline:6.1f} × baseline")
    assert all(seconds > 0 for _, seconds in rows)


def test_one_reconciler_pass(red, capsys):
    call_command("load_catalog")
    cluster = big_cluster("rec", 16)  # room for every copy the pass places
    model = Model.objects.get(repo_id="Qwen/Qwen3-0.6B")
    made = [
        factories.make_deployment(
            f"r-{n}",
            red,
            cluster=cluster,
            model=model,
            accelerators_per_copy=Decimal("0.1"),
            copies_wanted=0,
        )
        for n in range(DEPLOYMENTS)
    ]
    for deployment in made:  # settled: placed, nothing to do, as most are most of the time
        reconciler.converge(deployment.pk)
    began = time.perf_counter()
    with connection.cursor() as cursor:
        for deployment in made:
            cursor.execute(
                "SELECT id, state FROM deployments_deployment WHERE id = %s", [deployment.pk]
            )
    baseline = time.perf_counter() - began
    began = time.perf_counter()
    reconciler.reconcile_all()
    seconds = time.perf_counter() - began
    # One in ten now wants a copy: those are placed (copies created, room reserved) in the pass.
    busy = made[::10]
    Deployment.objects.filter(pk__in=[d.pk for d in busy]).update(copies_wanted=1)
    began = time.perf_counter()
    with CaptureQueriesContext(connection) as queries:
        reconciler.reconcile_all()
    busy_seconds = time.perf_counter() - began
    with capsys.disabled():
        print(
            f"\nOne reconciler pass over {DEPLOYMENTS} settled deployments: {seconds:.3f} s "
            f"(target < 1 s for 1,000) = {seconds / baseline:.2f} × one query per deployment "
            f"({baseline:.3f} s); with {len(busy)} of them scaled up (placed in the pass): "
            f"{busy_seconds:.3f} s = {busy_seconds / baseline:.1f} × baseline, "
            f"{len(queries)} queries"
        )
    assert Deployment.objects.filter(state=DeploymentState.DEPLOYED).count() == DEPLOYMENTS - len(
        busy
    )
