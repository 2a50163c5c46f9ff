"""The console's /metrics for a Prometheus that scrapes the whole fleet: with the scrape token
(BERTH_METRICS_TOKEN) or a platform admin's session it adds deployments and copies by state, each
GPU's memory and reserved room, the files on their way, and the background tasks' run times and
queues, read from the console (daphne, as `make run` serves it) while the real worker and beat
run; a team's API key gets its gateway figures only, a wrong token a 401, and with no token set
no bearer token reads the fleet."""

from __future__ import annotations

from decimal import Decimal

import httpx
import pytest
from django.conf import settings

from catalog.models import ServerModel, ServerModelState
from console import task_figures
from console.models import ApiKey
from deployments.choices import CopyState, DeploymentState, MachineFilesState
from deployments.guard import state_change_allowed
from deployments.models import Copy, Deployment, MachineFiles, Reservation
from tests import factories
from tests.integration.test_gateway import session_of
from tests.processes import console_processes, console_server, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

TOKEN = "scrape-" + "0123456789abcdef" * 3
GIB = 2**30


def scraped(url: str, secret: str = TOKEN) -> httpx.Response:
    return httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {secret}"}, timeout=10)


def fleet(red) -> None:
    """Two GPUs of one machine: a serving copy holds 40 GiB of GPU 0 and a waiting one none; a
    download to this server and a copy to the machine are under way."""
    cluster = factories.make_cluster("lab", gpus=2)
    gpu = cluster.machines.get().accelerators.get(index=0)
    serving = factories.make_deployment("red-chat", red, cluster=cluster)
    waiting = factories.make_deployment("red-wait", red, cluster=cluster)
    with state_change_allowed():  # as if placed, started and left waiting
        Deployment.objects.filter(pk=serving.pk).update(state=DeploymentState.DEPLOYED)
        Deployment.objects.filter(pk=waiting.pk).update(state=DeploymentState.ERROR)
        held = Copy.objects.create(deployment=serving, ordinal=0, state=CopyState.READY)
        Copy.objects.create(deployment=waiting, ordinal=0, state=CopyState.PENDING)
    Reservation.objects.create(copy=held, machine=gpu.machine, accelerator=gpu,
                               reserved_bytes=40 * GIB, share=Decimal("0.5"))  # fmt: skip
    variant = serving.variant
    ServerModel.objects.create(variant=variant, state=ServerModelState.DOWNLOADING,
                               size_bytes=16 * GIB, progress_bytes=4 * GIB)  # fmt: skip
    MachineFiles.objects.create(machine=gpu.machine, variant=variant, size_bytes=16 * GIB,
                                state=MachineFilesState.COPYING, progress_bytes=GIB)  # fmt: skip


FLEET_LINES = [
    'berth_deployments{state="DEPLOYED"} 1',
    'berth_deployments{state="ERROR"} 1',
    'berth_deployments{state="STOPPED"} 0',
    'berth_copies{state="READY"} 1',
    'berth_copies{state="PENDING"} 1',
    'berth_copies{state="FAILED"} 0',
    'berth_accelerator_memory_bytes{cluster="lab",machine="lab-m1",gpu="0",'
    'product="NVIDIA-H100-80GB-HBM3"} 85520809984',
    'berth_accelerator_reserved_bytes{cluster="lab",machine="lab-m1",gpu="0",'
    'product="NVIDIA-H100-80GB-HBM3"} 42949672960',
    'berth_accelerator_reserved_bytes{cluster="lab",machine="lab-m1",gpu="1",'
    'product="NVIDIA-H100-80GB-HBM3"} 0',
    'berth_accelerator_copies{cluster="lab",machine="lab-m1",gpu="0",'
    'product="NVIDIA-H100-80GB-HBM3"} 1',
    'berth_download_progress_bytes{model="Qwen/Qwen3-8B",variant="bf16",to="this server"} '
    "4294967296",
    'berth_download_size_bytes{model="Qwen/Qwen3-8B",variant="bf16",to="this server"} 17179869184',
    'berth_download_progress_bytes{model="Qwen/Qwen3-8B",variant="bf16",to="lab-m1"} 1073741824',
]


def test_the_scrape_token_reads_the_whole_fleet_by_state_gpu_and_download(red, bob, alice):
    fleet(red)
    with console_server(BERTH_METRICS_TOKEN=TOKEN) as url:
        answer = scraped(url)
        assert answer.status_code == 200
        lines = answer.text.splitlines()
        assert [line for line in FLEET_LINES if line not in lines] == []
        assert "# TYPE berth_deployments gauge" in lines
        # A platform admin's session reads the same; a team's key only its gateway figures.
        assert (
            'berth_copies{state="READY"} 1'
            in httpx.get(f"{url}/metrics", cookies=session_of(alice), timeout=10).text
        )
        _key, secret = ApiKey.issue(bob, "red-scraper")
        as_team = scraped(url, secret)
        assert as_team.status_code == 200
        assert 'berth_gateway_ready_copies{deployment="red-chat"} 1' in as_team.text
        assert "berth_deployments" not in as_team.text
        assert "berth_accelerator" not in as_team.text
        wrong = scraped(url, TOKEN[:-1] + "x")
        assert wrong.status_code == 401
        assert wrong.json()["error"]["message"] == (
            "The API key is not valid: it was revoked, it expired, or it never existed. Create "
            "one under API keys."
        )
        assert TOKEN not in wrong.text


def test_the_background_tasks_run_times_and_queues_are_on_metrics(tmp_path, alice):
    """Read as a platform admin: with no scrape token set, no bearer token reads the fleet."""
    reconcile = 'berth_task_duration_seconds_count{task="deployments.tasks.reconcile"}'

    def as_admin(url: str) -> list[str]:
        answer = httpx.get(f"{url}/metrics", cookies=session_of(alice), timeout=10)
        return answer.text.splitlines()

    def reconciled_twice(url: str) -> bool:
        for line in as_admin(url):
            if line.startswith(reconcile + " "):
                return float(line.split()[-1]) >= 2
        return False

    with console_processes(tmp_path), console_server() as url:
        assert scraped(url).status_code == 401
        wait_for(lambda: reconciled_twice(url), 60, 0.5, "two reconcile runs on /metrics")
        lines = as_admin(url)
    assert "# TYPE berth_task_duration_seconds histogram" in lines
    runs = next(float(line.split()[-1]) for line in lines if line.startswith(reconcile + " "))
    inf = 'berth_task_duration_seconds_bucket{task="deployments.tasks.reconcile",le="+Inf"}'
    assert f"{inf} {int(runs)}" in lines  # every run is within +Inf
    assert 'berth_task_failures_total{task="deployments.tasks.reconcile"} 0' in lines
    waiting = [line for line in lines if line.startswith("berth_task_queue_length{")]
    assert [line.split("} ")[0] for line in waiting] == [
        f'berth_task_queue_length{{queue="{settings.CELERY_TASK_DEFAULT_QUEUE}"',
        f'berth_task_queue_length{{queue="{settings.CELERY_TRANSFER_QUEUE}"',
    ]


def test_a_run_counts_in_every_bucket_at_or_above_its_seconds_and_a_failure_is_counted(db):
    for key in ("within", "seconds", "failures"):
        task_figures.client().delete(task_figures.key(key))
    task_figures.record("demo.slow", 0.3, failed=False)
    task_figures.record("demo.slow", 7.0, failed=True)
    lines = task_figures.text().splitlines()
    bucket = 'berth_task_duration_seconds_bucket{task="demo.slow",le="%s"} %d'
    for bound, runs in [("0.1", 0), ("0.5", 1), ("5", 1), ("30", 2), ("+Inf", 2)]:
        assert bucket % (bound, runs) in lines
    assert 'berth_task_duration_seconds_sum{task="demo.slow"} 7.3' in lines
    assert 'berth_task_duration_seconds_count{task="demo.slow"} 2' in lines
    assert 'berth_task_failures_total{task="demo.slow"} 1' in lines
