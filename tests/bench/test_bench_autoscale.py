"""The autoscaling benchmark (tests/bench/bench_autoscale.py) with the real processes: worker,
beat, watcher and the gateway on the test database, simulated engines that load at once. Full
size in `make bench`, a smoke size inside `make test`. No timing is asserted (the machines are
shared and noisy): only that every request was answered, that the autoscaled deployment did
grow to the peak's copies, and that the ratios were printed."""

from __future__ import annotations

import os

import bench_autoscale
import pytest
from django.core.management import call_command

from console.models import ApiKey
from deployments.choices import COPY_MAY_HAVE_ENGINE, CopyState, DeploymentState
from deployments.models import Copy, Deployment
from tests.bench.test_bench_lifecycle import ZERO_LOAD
from tests.integration.test_lifecycle import host, reached, simulated_cluster
from tests.processes import console_processes, gateway_server, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.bench]
SIZE = bench_autoscale.FULL if os.environ.get("BERTH_BENCH_FULL") == "1" else bench_autoscale.SMOKE
FAST = {
    "BERTH_AUTOSCALE_EVERY_S": "0.5",
    "BERTH_GATEWAY_REFRESH_S": "0.2",
    "BERTH_RECONCILE_EVERY_S": "1",
    "BERTH_WATCH_EVERY_S": "0.2",
}


def holding_room(deployment: Deployment) -> int:
    return Copy.objects.filter(deployment=deployment, state__in=COPY_MAY_HAVE_ENGINE).count()


def serving(deployment: Deployment) -> int:
    ready = Copy.objects.filter(deployment=deployment, state=CopyState.READY)
    return ready.filter(draining_since=None).count()


@pytest.mark.timeout(900)
def test_a_step_to_32_streams_against_a_fixed_deployment_sized_for_the_peak(
    tmp_path, bob, red, capsys
):
    call_command("load_catalog")
    cluster = simulated_cluster("step", gpus=2 * bench_autoscale.PEAK_COPIES, **ZERO_LOAD)
    key = ApiKey.issue(bob, "bench")[1]
    settings = bench_autoscale.ENGINE_SETTINGS
    runs = {}
    with console_processes(tmp_path, **FAST), gateway_server(**FAST) as gateway:
        fixed = host(bob, red, cluster, "fixed", copies=bench_autoscale.PEAK_COPIES,
                     engine_settings=settings)  # fmt: skip
        scaled = host(bob, red, cluster, "scaled", autoscaling=bench_autoscale.POLICY,
                      engine_settings=settings)  # fmt: skip
        for deployment in (fixed, scaled):
            wait_for(reached(deployment, DeploymentState.DEPLOYED), 120, what="DEPLOYED")
            streams = bench_autoscale.Streams(gateway, key, deployment.name)
            runs[deployment.name] = bench_autoscale.step(
                streams,
                SIZE,
                lambda d=deployment: holding_room(d),
                lambda d=deployment: serving(d),
            )
    text = "\n".join(bench_autoscale.report(runs["fixed"], runs["scaled"], SIZE))
    with capsys.disabled():
        print(f"\n{text}")
    assert runs["fixed"].failed == 0 and runs["scaled"].failed == 0, text
    assert runs["scaled"].target_held_after_s is not None, text  # it grew to the peak's copies
    assert "× fixed (goal ≤ 0.7 ×)" in text
