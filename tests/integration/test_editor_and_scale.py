"""The engine-settings editor of a deployment (Engine settings → Change) and the scale dialog,
through Django's test client: presets, warnings, the preview against the argv the launcher
builds, the memory-share cap, saving (a new generation), the hostile Other flags corpus through
the editor and the API, and who may open them."""

from __future__ import annotations

import re
import shlex
from decimal import Decimal
from html import unescape

import pytest
from django.core.management import call_command
from django.template.loader import render_to_string
from django.test import Client

from catalog.models import Model
from clusters.backends.argv import without_key
from console.models import ApiKey
from deployments import launching, placing
from deployments.engine.argv import PORT_SHOWN
from deployments.models import Copy, Deployment, Event
from tests import factories
from tests.flag_corpus import HOSTILE
from tests.integration.test_wizard import cluster_of, text

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def catalog(db):
    call_command("load_catalog", stdout=open("/dev/null", "w"))  # noqa: SIM115


@pytest.fixture
def cluster(db):
    return cluster_of("lab")


def deployment_of(team, cluster, repo="Qwen/Qwen3-0.6B", variant="bf16", **fields) -> Deployment:
    model = Model.objects.get(repo_id=repo)
    values = {"engine_settings": {"max_model_len": 4096}, "name": "tiny", **fields}
    return Deployment.objects.create(
        team=team, cluster=cluster, model=model, variant=model.variants.get(name=variant), **values
    )


@pytest.fixture
def tiny(red, cluster):
    return deployment_of(red, cluster)


def advanced(client: Client) -> Client:
    client.post("/deployments/new/mode/", {"mode": "advanced", "next": "/deployments/"})
    return client


def editor_url(deployment) -> str:
    return f"/deployments/{deployment.pk}/settings/"


ADVANCED_FORM = {
    "editor_mode": "advanced",
    "max_model_len": "4096",
    "memory_share": "",
    "max_num_seqs": "",
    "max_num_batched_tokens": "",
    "prefix_caching": "on",
    "chunked_prefill": "on",
    "tool_call_parser": "",
    "reasoning_parser": "",
    "other_flags": "",
}


def post_editor(client, deployment, **changes):
    return client.post(editor_url(deployment), {**ADVANCED_FORM, **changes})


def fresh(deployment) -> Deployment:
    return Deployment.objects.get(pk=deployment.pk)


# --- opening it ------------------------------------------------------------------------------


def test_an_operator_opens_the_editor_with_the_current_settings(as_bob, bob, tiny):
    response = as_bob.get(editor_url(tiny))
    assert response.status_code == 200
    assert 'name="max_model_len" value="4096"' in response.content.decode()
    assert "Engine settings of tiny" in text(response)


def test_a_viewer_sees_the_settings_but_cannot_open_the_editor(as_carol, carol, bob, tiny):
    assert as_carol.get(editor_url(tiny)).status_code == 403
    assert as_carol.post(editor_url(tiny), {**ADVANCED_FORM, "action": "save"}).status_code == 403
    assert as_carol.get(f"/deployments/{tiny.pk}/scale/dialog/").status_code == 403
    summary = render_to_string(
        "deployments/editor/_summary.html", {"deployment": tiny, "operates_team": False}
    )
    assert "max_model_len" in summary and "4096" in summary and "Change" not in summary
    operator = render_to_string(
        "deployments/editor/_summary.html", {"deployment": tiny, "operates_team": True}
    )
    assert f'href="/deployments/{tiny.pk}/settings/"' in operator


def test_an_outsider_does_not_find_it(as_dave, dave, tiny):
    assert as_dave.get(editor_url(tiny)).status_code == 404


# --- presets, warnings, preview --------------------------------------------------------------


@pytest.mark.parametrize(
    "key,label,changed",
    [
        ("low_memory", "Low memory", "8-bit context cache, Requests at once, Without CUDA graphs"),
        ("many_users", "Many users", "Longest conversation (tokens), Requests at once"),
        ("long_documents", "Long documents", "Context cache precision, Longest conversation"),
    ],
)
def test_a_preset_changes_only_its_settings_and_shows_which(as_bob, bob, tiny, key, label, changed):
    advanced(as_bob)
    form = {**ADVANCED_FORM, "other_flags": "--seed 3", "preset": key}
    response = as_bob.post(editor_url(tiny), form)
    page = text(response)
    assert f"Tuned for {label}: changed" in page
    html = response.content.decode()
    assert 'id="control-tool_calling"' in html  # no preset is about tool calling
    assert not re.search(r'class="control changed[^"]*" id="control-tool_calling"', html)
    assert 'class="control changed' in html
    assert 'value="--seed 3"' in html  # not about other flags: kept
    assert fresh(tiny).engine_settings == {"max_model_len": 4096}  # nothing saved yet


def test_each_warning_shows_beside_its_setting_before_save(as_bob, bob, tiny):
    advanced(as_bob)
    page = text(
        post_editor(
            as_bob,
            tiny,
            max_model_len="50000",
            memory_share="97",
            tool_call_parser="hermes",
            action="check",
        )
    )
    assert (
        "A conversation of 50,000 tokens is longer than Qwen3 0.6B supports (40,960 tokens)" in page
    )
    assert "A memory share of 97% leaves vLLM too little room" in page
    assert "A tool format (hermes) is set but tool calling is off" in page
    quiet = text(post_editor(as_bob, tiny, action="check"))
    assert "No warnings: nothing here stops the engine from starting." in quiet


def test_the_check_endpoint_returns_warnings_and_preview_without_saving(as_bob, bob, tiny):
    advanced(as_bob)
    response = as_bob.post(
        f"/deployments/{tiny.pk}/settings/check/", {**ADVANCED_FORM, "max_model_len": "50000"}
    )
    assert "longer than Qwen3 0.6B supports" in text(response)
    assert "--max-model-len 50000" in text(response) and "vllm serve Qwen/Qwen3-0.6B" in text(
        response
    )
    assert fresh(tiny).engine_settings == {"max_model_len": 4096}


def preview_of(response) -> list[str]:
    found = re.search(r'id="argv-preview"><code>(.*?)</code>', response.content.decode(), re.S)
    return shlex.split(unescape(found.group(1)))


def test_the_preview_is_the_argv_handed_to_the_backend(as_bob, bob, red, cluster):
    settings = {
        "max_model_len": 8192,
        "kv_cache_dtype": "fp8",
        "enable_prefix_caching": False,
        "enable_auto_tool_choice": True,
        "tool_call_parser": "hermes",
        "other_flags": "--max-lora-rank 16",
    }
    deployment = deployment_of(
        red, cluster, engine_settings=settings, accelerators_per_copy=Decimal("0.5"), revision="abc"
    )
    copy = factories.make_copy(deployment)
    placing.reserve(deployment, [copy])
    launched = launching.engine_argv(Copy.objects.get(pk=copy.pk), 8123)
    shown = [PORT_SHOWN if item == "8123" else item for item in without_key(launched)]
    assert "--api-key" not in launched  # the key travels in the engine's environment
    assert preview_of(advanced(as_bob).get(editor_url(deployment))) == shown


def test_on_a_cpu_machine_the_preview_is_the_cpu_builds_argv_and_no_memory_share_is_offered(
    as_bob, bob, red
):
    laptop = cluster_of("laptop", card=("CPU (8 cores)", 60 * 2**30, ""), gpus=1, vendor="cpu")
    deployment = deployment_of(red, laptop, accelerators_per_copy=Decimal("0.5"))
    copy = factories.make_copy(deployment)
    placing.reserve(deployment, [copy])
    launched = launching.engine_argv(Copy.objects.get(pk=copy.pk), 8123)
    assert "--gpu-memory-utilization" not in launched
    page = advanced(as_bob).get(editor_url(deployment))
    assert preview_of(page) == [PORT_SHOWN if item == "8123" else item for item in launched]
    assert 'name="memory_share"' not in page.content.decode()
    spec = launching.spec_for(Copy.objects.get(pk=copy.pk), 8123, "engine-key")
    assert spec.on_cpu and spec.env["OMP_NUM_THREADS"] == "16"  # ⌊0.5 × 32 cores⌋
    assert spec.secret_env == {"VLLM_API_KEY": "engine-key"}


def test_the_memory_share_is_capped_and_the_editor_says_so(as_bob, bob, red, cluster):
    half = deployment_of(red, cluster, name="half", accelerators_per_copy=Decimal("0.5"))
    advanced(as_bob)
    shown = as_bob.get(editor_url(half))
    assert "Empty: 40% of the accelerator. It can be lowered, and raised up to 45%" in text(shown)
    response = post_editor(as_bob, half, memory_share="90", action="save")
    assert response.status_code == 302
    assert fresh(half).engine_settings == {"max_model_len": 4096, "gpu_memory_utilization": 0.45}
    messages = text(as_bob.get(f"/deployments/{half.pk}/"))
    assert "90% is more than a copy of 0.5 of an accelerator may use: capped at 45.0%" in messages
    lower = post_editor(as_bob, half, memory_share="30", action="save")
    assert lower.status_code == 302
    assert fresh(half).engine_settings["gpu_memory_utilization"] == 0.3


def test_a_copy_placed_without_a_share_is_launched_with_its_deployments_share(red, cluster):
    half = deployment_of(red, cluster, name="half", accelerators_per_copy=Decimal("0.5"))
    half.engine_settings = {"gpu_memory_utilization": 0.3}
    half.save()
    copy = factories.make_copy(half)
    assert copy.gpu_memory_utilization is None
    assert launching.launch_facts(copy, 8000, []).gpu_memory_utilization == 0.3
    half.engine_settings = {}
    half.save()
    assert (
        launching.launch_facts(Copy.objects.get(pk=copy.pk), 8000, []).gpu_memory_utilization == 0.4
    )


# --- saving ----------------------------------------------------------------------------------


def test_saving_changed_settings_replaces_the_copies_by_a_new_generation(as_bob, bob, tiny):
    advanced(as_bob)
    before = tiny.generation
    response = post_editor(as_bob, tiny, max_model_len="2048", action="save")
    assert response["Location"] == f"/deployments/{tiny.pk}/"
    saved = fresh(tiny)
    assert saved.engine_settings == {"max_model_len": 2048} and saved.generation == before + 1
    assert Event.objects.filter(
        deployment=tiny, message__startswith="Change engine settings"
    ).exists()


def test_saving_nothing_new_changes_nothing(as_bob, bob, tiny):
    advanced(as_bob)
    post_editor(as_bob, tiny, action="save")
    assert fresh(tiny).generation == tiny.generation


def test_before_save_it_says_whether_the_deployment_keeps_serving(as_bob, bob, red):
    small = cluster_of("one", gpus=1)
    whole = deployment_of(red, small, name="whole", accelerators_per_copy=Decimal(1))
    copy = factories.make_copy(whole)
    placing.reserve(whole, [copy])
    page = text(as_bob.get(editor_url(whole)))
    assert "no room for a new copy beside the running one" in page
    assert "unavailable while its copy restarts" in page
    two = deployment_of(red, cluster_of("two"), name="two", copies_wanted=2)
    assert "replaces the copies one at a time" in text(as_bob.get(editor_url(two)))


def test_novice_mode_keeps_the_settings_it_does_not_show(as_bob, bob, red, cluster):
    kept = {"max_model_len": 4096, "enforce_eager": True, "other_flags": "--seed 1"}
    deployment = deployment_of(red, cluster, name="kept", engine_settings=kept)
    response = as_bob.post(
        editor_url(deployment), {"editor_mode": "novice", "max_model_len": "2048", "action": "save"}
    )
    assert response.status_code == 302
    assert fresh(deployment).engine_settings == {**kept, "max_model_len": 2048}


def test_every_hostile_text_is_refused_by_the_editor_and_the_api(as_bob, bob, tiny):
    advanced(as_bob)
    _key, secret = ApiKey.issue(bob, "test")
    api = Client()
    for hostile, words in HOSTILE:
        page = post_editor(as_bob, tiny, other_flags=hostile, action="save")
        shown = unescape(page.content.decode())
        assert page.status_code == 200 and all(word in shown for word in words), hostile
        answer = api.post(
            f"/api/v1/deployments/{tiny.pk}/engine-settings",
            {"engine_settings": {"max_model_len": 4096, "other_flags": hostile}},
            content_type="application/json",
            headers={"Authorization": f"Bearer {secret}"},
        )
        # Well-formed, refused by the review of the cluster's vLLM flags: a 400 (README).
        assert answer.status_code == 400, hostile
        assert answer.json()["field"] == "engine_settings"
        assert all(word in answer.json()["detail"] for word in words), hostile
    assert fresh(tiny).engine_settings == {"max_model_len": 4096}
    assert not Event.objects.filter(deployment=tiny).exists()


def test_the_api_takes_other_flags_that_pass_the_checks(bob, tiny):
    _key, secret = ApiKey.issue(bob, "test")
    answer = Client().post(
        f"/api/v1/deployments/{tiny.pk}/engine-settings",
        {"engine_settings": {"other_flags": "--max-lora-rank 16"}},
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert answer.status_code == 202
    assert fresh(tiny).engine_settings == {"other_flags": "--max-lora-rank 16"}


def test_the_list_of_vllm_settings_is_searchable(as_bob, bob, tiny):
    advanced(as_bob)
    page = text(as_bob.get(editor_url(tiny), {"flag_q": "prefix caching"}))
    assert "--enable-prefix-caching --no-enable-prefix-caching" in page
    assert "--max-lora-rank" not in page
    assert "vLLM 0.32.0" in page


def test_the_clusters_vllm_version_decides_the_flags(as_bob, bob, red):
    old = cluster_of("old")
    old.engine_version = "0.16.0"
    old.save()
    deployment = deployment_of(red, old, name="on-old")
    advanced(as_bob)
    page = text(as_bob.get(editor_url(deployment), {"flag_q": "swap"}))
    assert "--swap-space" in page and "Not here: it takes memory outside the copy's share" in page
    refused = post_editor(
        as_bob, deployment, other_flags="--performance-mode interactivity", action="save"
    )
    assert refused.status_code == 200
    assert "‘--performance-mode’ is not a flag of vLLM 0.16.0" in unescape(text(refused))
    assert post_editor(as_bob, deployment, other_flags="--seed 3", action="save").status_code == 302


def test_the_list_of_flags_says_which_can_be_set_here(as_bob, bob, tiny):
    advanced(as_bob)
    page = text(as_bob.get(editor_url(tiny), {"flag_q": "compilation"}))
    assert "Only these keys: cudagraph_capture_sizes, cudagraph_mode" in page
    page = text(as_bob.get(editor_url(tiny), {"flag_q": "numa"}))
    assert "Not here: it has not been reviewed for Berth yet" in page
    assert "Can be set under Other flags." in text(as_bob.get(editor_url(tiny), {"flag_q": "seed"}))


# --- the scale dialog ------------------------------------------------------------------------


def scale_page(client, deployment, **query):
    return text(client.get(f"/deployments/{deployment.pk}/scale/dialog/", query))


def test_the_scale_dialog_counts_the_accelerators_and_says_what_fits(as_bob, bob, red, cluster):
    whole = deployment_of(red, cluster, name="whole", accelerators_per_copy=Decimal(1))
    page = scale_page(as_bob, whole)
    assert (
        "Each copy uses 1 accelerator. The engine takes 80% of each accelerator's memory: "
        "63.72 GiB of 79.65 GiB." in page
    )
    assert (
        "This cluster has 2 accelerators, so up to 2 copies fit when nothing else is running on it."
        in page
    )
    html = as_bob.get(f"/deployments/{whole.pk}/scale/dialog/").content.decode()
    assert f'action="/deployments/{whole.pk}/scale/"' in html


def test_asking_for_more_says_which_cannot_start_and_what_to_do(as_bob, bob, red, cluster):
    whole = deployment_of(red, cluster, name="whole", accelerators_per_copy=Decimal(1))
    page = text(as_bob.get(f"/deployments/{whole.pk}/scale/fit/", {"copies": 3}))
    assert (
        "2 of 3 copies fit now; this cluster holds at most 2 of this size, so the other 1 "
        "cannot start until it has more room." in page
    )
    assert "1 cannot start:" in page and "Scale to 2, or add a machine to the cluster." in page


def test_a_share_above_a_half_keeps_an_accelerator_of_its_own(as_bob, bob, tiny):
    page = scale_page(as_bob, tiny, copies=1, accelerators_per_copy="0.75")
    assert "A share above 0.5 keeps each copy on an accelerator of its own." in page
    assert "The engine takes 60% of each accelerator's memory: 47.79 GiB of 79.65 GiB." in page
    half = scale_page(as_bob, tiny, copies=1, accelerators_per_copy="0.5")
    assert "A share above 0.5" not in half


def test_the_deployments_own_copies_count_as_room_when_scaling(as_bob, bob, red):
    one = cluster_of("one", gpus=1)
    whole = deployment_of(red, one, name="whole", accelerators_per_copy=Decimal(1))
    placing.reserve(whole, [factories.make_copy(whole)])
    page = scale_page(as_bob, whole, copies=1)
    assert "The copy fits now." in page


def test_a_bad_size_in_the_dialog_says_why(as_bob, bob, tiny):
    page = scale_page(as_bob, tiny, copies=1, accelerators_per_copy="1.5")
    assert "1.5 is not a size" in page


def test_the_dialog_applies_through_the_existing_scale_action(as_bob, bob, tiny):
    response = as_bob.post(
        f"/deployments/{tiny.pk}/scale/", {"copies": 2, "accelerators_per_copy": "0.5"}
    )
    assert response.status_code == 302
    assert fresh(tiny).copies_wanted == 2


MY_VIEWS = [
    "deployment_engine_settings",
    "deployment_engine_settings_check",
    "deployment_scale_dialog",
    "deployment_scale_fit",
]


@pytest.mark.parametrize("name", MY_VIEWS)
def test_viewers_get_403_and_other_teams_404_on_the_editor_and_dialog_views(
    as_carol, as_bob, carol, bob, tiny, name
):
    from django.urls import reverse

    green = deployment_of(factories.make_team("green"), tiny.cluster, name="green-one")
    post_only = name == "deployment_engine_settings_check"
    for method in (as_carol.post,) if post_only else (as_carol.get, as_carol.post):
        assert method(reverse(name, args=[tiny.pk]), {"copies": "3"}).status_code == 403
    for method in (as_bob.post,) if post_only else (as_bob.get, as_bob.post):
        assert method(reverse(name, args=[green.pk]), {"copies": "3"}).status_code == 404
    assert fresh(tiny).engine_settings == {"max_model_len": 4096}
    assert fresh(tiny).copies_wanted == 1
