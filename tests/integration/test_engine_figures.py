"""The engines' own figures (/metrics) reach the deployment's page and move with traffic."""

from __future__ import annotations

import httpx
import pytest
from django.core.management import call_command

from deployments.choices import DeploymentState
from deployments.models import Copy, Deployment, EngineFigures
from tests.integration.test_lifecycle import host, simulated_cluster
from tests.processes import console_processes, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def chat(copy: Copy) -> None:
    """Straight to the copy's engine, on its Unix socket (as the gateway reaches it)."""
    body = {
        "model": copy.deployment.name,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hello"}],
    }
    with httpx.Client(transport=httpx.HTTPTransport(uds=copy.socket_path), timeout=30) as engine:
        answer = engine.post(
            "http://localhost/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {copy.engine_api_key()}"},
        )
    assert answer.status_code == 200, answer.text


def test_scraped_figures_grow_with_traffic_and_show_on_the_page(tmp_path, bob, red, as_bob):
    call_command("load_catalog")
    cluster = simulated_cluster("figures", BERTH_SIM_TOKENS_PER_SECOND="400")
    with console_processes(tmp_path, BERTH_METRICS_EVERY_S="0.5"):
        deployment = host(bob, red, cluster, "counted", engine_settings={"max_model_len": 4096})
        wait_for(
            lambda: Deployment.objects.get(pk=deployment.pk).state == DeploymentState.DEPLOYED, 60
        )
        copy = Copy.objects.get(deployment=deployment)
        for _ in range(3):
            chat(copy)
        wait_for(
            lambda: (
                EngineFigures.objects.filter(
                    deployment=deployment, generation_tokens_total__gte=24
                ).count()
                >= 2
            ),
            30,
            what="figures after the traffic",
        )
    page = as_bob.get(f"/deployments/{deployment.pk}/").content.decode()
    assert "Reported by the engine" in page and "Tokens per second" in page
    assert "No figures yet" not in page
    latest = EngineFigures.objects.filter(deployment=deployment).order_by("-at").first()
    assert latest.prompt_tokens_total > 0 and latest.ttft_count >= 3
