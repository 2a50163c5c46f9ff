"""A new operator's first hour: what Berth chooses when the request leaves it open (a variant
already on this server first, the first cluster with room, a unique name), said with why; and a
model that could never fit fails at once, before anything is downloaded."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.management import call_command

from catalog.models import Model, ServerModel
from clusters.models import Cluster
from deployments import choosing
from deployments.choices import DeploymentState, ErrorCode
from deployments.models import Deployment
from tests.integration.test_api import Caller

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(db) -> Cluster:
    call_command("seed_demo")
    return Cluster.objects.get(name="demo")


def host(bob: Any, **body: Any) -> Any:
    return Caller(bob).post("/deployments", body)


def test_a_variant_on_this_server_wins_over_a_better_one_that_needs_a_download(demo):
    model = Model.objects.get(repo_id="Qwen/Qwen3-0.6B")
    picked = choosing.variant_for(model, demo)
    assert picked.value.name == "bf16"
    assert picked.why == "bf16: on this server; fp8 would need a 0.70 GiB download."


def test_the_variant_novice_mode_prefers_is_kept_when_it_is_on_this_server(demo):
    model = Model.objects.get(repo_id="Qwen/Qwen3-0.6B")
    fp8 = model.variants.get(name="fp8")
    ServerModel.objects.create(variant=fp8, state="ready", path="/srv/models/qwen3-fp8")
    picked = choosing.variant_for(model, demo)
    assert picked.value == fp8
    assert picked.why.startswith("fp8: on this server. FP8 runs natively on these accelerators")


def test_the_api_chooses_variant_cluster_and_name_and_says_why(demo, bob):
    response = host(bob, model="Qwen/Qwen3-0.6B", accelerators_per_copy=0.5)
    assert response.status_code == 202, response.content
    chosen = response.json()["chosen"]
    assert chosen == {
        "cluster": {
            "value": "demo",
            "why": "demo: the first cluster, by name, with room for a copy now.",
        },
        "name": {"value": "qwen3-0-6b", "why": "qwen3-0-6b: from the repository id."},
        "variant": {
            "value": "bf16",
            "why": "bf16: on this server; fp8 would need a 0.70 GiB download.",
        },
    }
    deployment = Deployment.objects.get(pk=response.json()["id"])
    assert (deployment.name, deployment.variant.name, deployment.cluster) == (
        "qwen3-0-6b",
        "bf16",
        demo,
    )


def test_a_second_deployment_of_the_model_gets_the_next_free_name(demo, bob):
    assert host(bob, model="Qwen/Qwen3-0.6B", accelerators_per_copy=0.5).status_code == 202
    second = host(bob, model="Qwen/Qwen3-0.6B", accelerators_per_copy=0.5)
    assert second.json()["chosen"]["name"] == {
        "value": "qwen3-0-6b-2",
        "why": "qwen3-0-6b-2: from the repository id (qwen3-0-6b is taken).",
    }


def test_what_the_request_names_is_used_and_not_reported_as_chosen(demo, bob):
    body = {"model": "Qwen/Qwen3-0.6B", "variant": "fp8", "cluster": "demo", "name": "mine"}
    response = host(bob, **body, accelerators_per_copy=0.5)
    assert response.status_code == 202
    assert response.json()["chosen"] == {}


def test_a_size_left_out_is_the_smallest_usual_one_that_holds_a_copy_as_in_the_wizard(demo, bob):
    # Qwen3-0.6B at its 40,960 tokens: 1.40 GiB of weights and 4.38 GiB of KV cache, within a
    # quarter of an 80 GB GPU.
    body = {"model": "Qwen/Qwen3-0.6B", "variant": "bf16", "cluster": "demo", "name": "small"}
    response = host(bob, **body)
    assert response.status_code == 202, response.content
    assert response.json()["chosen"] == {
        "accelerators_per_copy": {
            "value": "0.25",
            "why": "0.25: the smallest usual size that holds one copy with its context on demo.",
        }
    }
    assert str(Deployment.objects.get(name="small").accelerators_per_copy) == "0.250"
    # A longer model that needs more than a quarter gets the next usual size up.
    bigger = host(bob, model="Qwen/Qwen3-8B", variant="bf16", cluster="demo", name="bigger")
    assert bigger.json()["chosen"]["accelerators_per_copy"]["value"] == "0.333"


# The README's rule: a value against a rule the OpenAPI document states (the name's pattern) is
# a 422; a well-formed one Berth cannot do for what is there (no such cluster or variant here,
# a variant this cluster's engine cannot run) a 400.
@pytest.mark.parametrize(
    ("body", "status", "field", "detail"),
    [
        ({"cluster": "nowhere"}, 400, "cluster", "cluster: no cluster named nowhere; clusters: "),
        ({"variant": "int3"}, 400, "variant", "variant: Qwen/Qwen3-0.6B has no variant int3; "),
        ({"name": "Not A Slug"}, 422, "name", "name: "),
        (
            {"variant": "fp8", "cluster": "local"},
            400,
            "variant",
            "variant: fp8 cannot run on local: fp8 does not run on vLLM's CPU build",
        ),
    ],
)
def test_bad_values_beside_the_defaults_are_named(demo, bob, body, status, field, detail):
    response = host(bob, model="Qwen/Qwen3-0.6B", **body)
    assert response.status_code == status, response.content
    assert response.json()["field"] == field
    assert response.json()["detail"].startswith(detail)
    assert not Deployment.objects.exists()


def test_a_name_already_taken_is_refused(demo, bob):
    assert host(bob, model="Qwen/Qwen3-0.6B", name="taken").status_code == 202
    again = host(bob, model="Qwen/Qwen3-0.6B", name="taken")
    assert again.status_code == 400
    assert again.json()["field"] == "name"
    assert Deployment.objects.count() == 1


def test_a_model_that_could_never_fit_fails_at_once_and_downloads_nothing(demo, bob):
    body = {"model": "deepseek-ai/DeepSeek-V3", "variant": "fp8", "cluster": "demo"}
    response = host(bob, accelerators_per_copy=1, **body)  # 671 B parameters on one GPU
    assert response.status_code == 202, response.content
    deployment = Deployment.objects.get(pk=response.json()["id"])
    assert deployment.state == DeploymentState.FAILED
    assert deployment.last_error_code == ErrorCode.NO_FIT
    assert deployment.last_message.startswith("Does not fit, even on the empty cluster: ")
    assert not ServerModel.objects.filter(variant=deployment.variant).exists()
    assert not deployment.copies.exists()


def test_the_where_step_quotes_one_conversation_length_for_guidance_and_fit(demo, as_bob):
    model = Model.objects.get(repo_id="Qwen/Qwen3-8B")
    started = as_bob.get(f"/deployments/new/?model={model.pk}&cluster={demo.pk}")
    page = as_bob.get(started["Location"]).content.decode()
    quoted = set(re.findall(r"at ([\d,]+) tokens", page))
    fit = set(re.findall(r"\(([\d,]+) tokens\)", page))
    assert quoted and fit and quoted == fit, (quoted, fit)


def test_a_cluster_where_the_named_variant_cannot_run_is_passed_over_with_why(demo, bob):
    """fp8 on the CPU cluster `local` only: the search names it among the clusters without room."""
    Cluster.objects.exclude(name="local").delete()
    response = host(bob, model="Qwen/Qwen3-0.6B", variant="fp8")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "cluster"
    assert response.json()["detail"].startswith(
        "cluster: no cluster can take a copy of Qwen/Qwen3-0.6B now (fp8 cannot run on local: "
        "fp8 does not run on vLLM's CPU build"
    )
    assert not Deployment.objects.exists()
