"""The hosting wizard through Django's test client, without JavaScript: its three entry points,
the whole flow in novice and advanced mode, the fit check in words, the suggestion applied with
one click, drafts kept server-side (back, forward, reload, two tabs), the variant novice mode
picks by hardware, and who may open it."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.core.management import call_command

from catalog.models import Model, ServerModel
from clusters.models import Accelerator, Cluster, Machine, SharingClass
from deployments import placing
from deployments.choices import DeploymentState
from deployments.models import Deployment, Event, Reservation
from tests import factories
from tests.flag_corpus import HOSTILE

pytestmark = pytest.mark.django_db
H100 = ("NVIDIA-H100-80GB-HBM3", 81559 * 2**20, "9.0")
A100_40 = ("NVIDIA-A100-SXM4-40GB", 40960 * 2**20, "8.0")
T4 = ("Tesla-T4", 15360 * 2**20, "7.5")


@pytest.fixture(autouse=True)
def catalog(db):
    call_command("load_catalog", stdout=open("/dev/null", "w"))  # noqa: SIM115


def cluster_of(name: str, card=H100, gpus: int = 2, vendor: str = "nvidia") -> Cluster:
    cluster = Cluster.objects.create(name=name, kind="simulator", sharing_strategy="fractional")
    machine = Machine.objects.create(
        cluster=cluster, name=f"{name}-1", cpu_count=32, system_memory_bytes=256 * 2**30
    )
    product, memory, capability = card
    for index in range(gpus):
        Accelerator.objects.create(
            machine=machine,
            index=index,
            vendor=vendor,
            product=product,
            memory_bytes=memory,
            compute_capability=capability,
            sharing_class=SharingClass.SHARED,
        )
    return cluster


def model(repo_id: str = "Qwen/Qwen3-0.6B") -> Model:
    return Model.objects.get(repo_id=repo_id)


def keep_on_this_server(repo_id: str) -> None:
    variant = model(repo_id).variants.first()
    ServerModel.objects.create(variant=variant, revision="main", state="ready", path="/m")


def text(response) -> str:
    """The page as a person reads it: tags gone, entities decoded, spaces collapsed."""
    body = re.sub(r"<[^>]+>", " ", response.content.decode())
    return " ".join(unescape(body).split())


def draft_url(response) -> str:
    assert response.status_code == 302, response.status_code
    return response["Location"]


def start(client, **query) -> str:
    """Open the wizard from an entry point; the URL of its first step."""
    return draft_url(client.get("/deployments/new/", query))


def step(url: str, name: str) -> str:
    return re.sub(r"/(model|where|settings|review)/$", f"/{name}/", url)


def where_values(cluster: Cluster, size="1", copies=1, **more) -> dict:
    return {"cluster": cluster.pk, "size": size, "copies": copies, **more}


# --- entry points ------------------------------------------------------------------------------


def test_deploy_under_deployments_starts_with_the_models_on_this_server(as_bob, bob):
    keep_on_this_server("Qwen/Qwen3-0.6B")
    keep_on_this_server("meta-llama/Llama-3.1-8B-Instruct")
    url = start(as_bob)
    assert url.endswith("/model/")
    page = text(as_bob.get(url))
    assert "1. Model 2. Where 3. Engine settings 4. Review" in page
    assert "Qwen3 0.6B" in page and "Llama 3.1 8B Instruct" in page
    assert "Qwen3 8B" not in page  # in the catalog, not on this server
    searched = text(as_bob.get(url, {"q": "llama"}))
    assert "Qwen3 0.6B" not in searched and "meta-llama/Llama-3.1-8B-Instruct" in searched


def test_choosing_a_model_goes_to_where(as_bob, bob):
    keep_on_this_server("Qwen/Qwen3-0.6B")
    cluster_of("lab")
    url = start(as_bob)
    chosen = as_bob.post(url, {"model": model().pk})
    assert chosen["Location"] == step(url, "where")
    assert "Host Qwen3 0.6B" in text(as_bob.get(chosen["Location"]))


def test_an_empty_server_says_where_to_find_models(as_bob, bob):
    page = text(as_bob.get(start(as_bob)))
    assert "No model is kept on this server yet" in page


def test_host_on_a_models_page_skips_the_model_step(as_bob, bob):
    cluster_of("lab")
    url = start(as_bob, model=model().pk)
    assert url.endswith("/where/")
    page = text(as_bob.get(url))
    assert (
        "1. Where 2. Engine settings 3. Review" in page and "Model" not in page.split("1.")[1][:10]
    )


def test_deploy_on_a_clusters_page_preselects_the_cluster(as_bob, bob):
    keep_on_this_server("Qwen/Qwen3-0.6B")
    cluster_of("aaa")
    chosen = cluster_of("zzz")
    url = start(as_bob, cluster=chosen.pk)
    assert url.endswith("/model/")
    where = as_bob.post(url, {"model": model().pk})["Location"]
    html = as_bob.get(where).content.decode()
    assert re.search(rf'<option value="{chosen.pk}" selected>zzz', html)


@pytest.mark.parametrize("query", [{"model": 999999}, {"cluster": 999999}])
def test_an_unknown_model_or_cluster_is_not_found(as_bob, bob, query):
    assert as_bob.get("/deployments/new/", query).status_code == 404


def test_an_unknown_draft_is_not_found(as_bob, bob):
    assert as_bob.get("/deployments/new/0123456789abcdef/where/").status_code == 404
    assert as_bob.get("/deployments/new/not-a-draft/where/").status_code == 404


# --- the whole flow without JavaScript ---------------------------------------------------------


def test_novice_hosts_from_where_to_the_deployments_page(as_bob, bob, red):
    cluster = cluster_of("lab")
    where = start(as_bob, model=model().pk)
    page = text(as_bob.get(where))
    assert "Variant: fp8" in page and "FP8 runs natively on these accelerators" in page
    assert "Other flags" not in page  # novice keeps only the choices a novice needs
    settings = as_bob.post(where, {**where_values(cluster, "0.25", 2), "action": "next"})
    assert settings["Location"] == step(where, "settings")
    editor = text(as_bob.get(settings["Location"]))
    assert "Tuned for" in editor and "Longest conversation" in editor
    assert (
        "Suggested: Tool calling in the hermes format: from vLLM's recipe for Qwen/Qwen3-0.6B"
        in editor
    )
    assert (
        "Show its thinking separately Suggested: Its thinking shown apart with the qwen3" in editor
    )
    assert "Other flags" not in editor and "Skip graph capture" not in editor
    review = as_bob.post(
        settings["Location"],
        {
            "editor_mode": "novice",
            "max_model_len": "4096",
            "tool_calling": "on",
            "thinking": "on",
            "action": "next",
        },
    )
    assert review["Location"] == step(where, "review")
    page = text(as_bob.get(review["Location"]))
    assert 'value="qwen3-0-6b"' in as_bob.get(review["Location"]).content.decode()
    assert "2 × 0.25" in page
    hosted = as_bob.post(
        review["Location"],
        {
            "name": "qwen3-0-6b",
            "chat_name": "qwen3-0.6b",
            "revision": "",
            "team": red.pk,
            "action": "host",
        },
    )
    deployment = Deployment.objects.get(name="qwen3-0-6b")
    assert hosted["Location"] == f"/deployments/{deployment.pk}/"
    assert deployment.state == DeploymentState.REQUESTED
    assert (deployment.copies_wanted, str(deployment.accelerators_per_copy)) == (2, "0.250")
    assert deployment.variant.name == "fp8" and deployment.team == red
    assert deployment.chat_name == "qwen3-0.6b"
    assert deployment.engine_settings == {
        "max_model_len": 4096,
        "enable_auto_tool_choice": True,
        "tool_call_parser": "hermes",
        "reasoning_parser": "qwen3",
    }
    assert Event.objects.filter(deployment=deployment, message__startswith="Host 2 × 0.25").exists()
    assert as_bob.get(review["Location"]).status_code == 404  # the draft is gone once hosted


def test_advanced_shows_the_engine_choice_and_every_setting(as_bob, bob, red):
    cluster = cluster_of("lab")
    as_bob.post("/deployments/new/mode/", {"mode": "advanced", "next": "/deployments/"})
    where = start(as_bob, model=model().pk)
    page = text(as_bob.get(where))
    assert "Variant and engine" in page and "gguf-q4_k_m: q4_k_m, gguf, on llama.cpp" in page
    awq_or_bf16 = model().variants.get(name="bf16")
    settings = as_bob.post(
        where, {**where_values(cluster, "0.5", 1), "variant": awq_or_bf16.pk, "action": "next"}
    )["Location"]
    editor = text(as_bob.get(settings))
    for words in ("Context and memory", "Throughput", "What it can do", "Compatibility"):
        assert words in editor
    assert "Other flags" in editor and "All vLLM settings" in editor and "--max-lora-rank" in editor
    form = {
        "editor_mode": "advanced",
        "max_model_len": "8192",
        "memory_share": "30",
        "prefix_caching": "on",
        "tool_calling": "on",
        "tool_call_parser": "hermes",
        "reasoning_parser": "",
        "enforce_eager": "on",
        "other_flags": "--max-lora-rank 16",
        "action": "next",
    }
    review = as_bob.post(settings, form)["Location"]
    hosted = as_bob.post(
        review,
        {
            "name": "tiny-advanced",
            "chat_name": "",
            "revision": "v1",
            "team": red.pk,
            "action": "host",
        },
    )
    deployment = Deployment.objects.get(name="tiny-advanced")
    assert hosted["Location"] == f"/deployments/{deployment.pk}/"
    assert deployment.variant == awq_or_bf16 and deployment.revision == "v1"
    assert deployment.chat_name == ""  # blank: endpoint only
    assert deployment.engine_settings == {
        "max_model_len": 8192,
        "gpu_memory_utilization": 0.3,
        "enable_chunked_prefill": False,
        "enable_auto_tool_choice": True,
        "tool_call_parser": "hermes",
        "enforce_eager": True,
        "other_flags": "--max-lora-rank 16",
    }


def test_the_wizard_refuses_every_hostile_text_and_hosts_nothing(as_bob, bob, red):
    cluster = cluster_of("lab")
    as_bob.post("/deployments/new/mode/", {"mode": "advanced", "next": "/deployments/"})
    where = start(as_bob, model=model().pk)
    bf16 = model().variants.get(name="bf16")
    settings = as_bob.post(
        where, {**where_values(cluster, "0.5", 1), "variant": bf16.pk, "action": "next"}
    )["Location"]
    for hostile, words in HOSTILE:
        form = {"editor_mode": "advanced", "other_flags": hostile, "action": "next"}
        page = as_bob.post(settings, form)
        shown = unescape(page.content.decode())
        assert page.status_code == 200 and all(word in shown for word in words), hostile
    assert not Deployment.objects.exists()


def test_the_mode_is_remembered_for_the_user(as_bob, bob):
    cluster_of("lab")
    assert "Other flags" not in text(as_bob.get(step(start(as_bob, model=model().pk), "where")))
    as_bob.post("/deployments/new/mode/", {"mode": "advanced", "next": "/deployments/"})
    page = text(as_bob.get(start(as_bob, model=model().pk)))
    assert "Variant and engine" in page
    assert (
        'aria-pressed="true">Advanced'
        in as_bob.get(start(as_bob, model=model().pk)).content.decode()
    )


def test_the_mode_switch_stays_on_this_site(as_bob, bob):
    response = as_bob.post(
        "/deployments/new/mode/", {"mode": "advanced", "next": "https://evil.example/"}
    )
    assert response["Location"] == "/deployments/"


# --- the fit check in words --------------------------------------------------------------------


def fit_words(client, where: str, values: dict) -> str:
    return text(client.post(where.replace("/where/", "/where/fit/"), values))


def test_the_fit_check_says_what_fits_and_changes_with_the_size(as_bob, bob):
    cluster = cluster_of("lab")
    where = start(as_bob, model=model("Qwen/Qwen3-8B").pk)
    one = fit_words(as_bob, where, where_values(cluster, "1", 2))
    quarter = fit_words(as_bob, where, where_values(cluster, "0.25", 2))
    assert (
        "All 2 copies fit now." in one
        and "Room now for 2 copies of this size; on an empty cluster, 2." in one
    )
    assert "Each copy needs" in one and "weights" in one and "context cache" in one
    assert "Each accelerator here has 79.65 GiB (NVIDIA-H100-80GB-HBM3)" in one
    assert "Room now for 8 copies of this size; on an empty cluster, 8." in quarter
    assert "a copy of ¼ of an accelerator gives the engine 15.93 GiB (20% of its memory)" in quarter
    assert one != quarter


def test_not_every_copy_fitting_says_the_rest_start_when_room_frees_up(as_bob, bob, red):
    cluster = cluster_of("lab")
    holder = factories.make_deployment("holder", red, cluster=cluster, model=model("Qwen/Qwen3-8B"))
    placing.reserve(holder, [factories.make_copy(holder)])  # one of the two GPUs is taken
    where = start(as_bob, model=model("Qwen/Qwen3-8B").pk)
    words = fit_words(as_bob, where, where_values(cluster, "0.5", 3))
    assert "2 of 3 copies fit now; the other 1 starts when room frees up." in words
    assert "Room now for 2 copies of this size; on an empty cluster, 4." in words
    more = fit_words(as_bob, where, where_values(cluster, "0.5", 5))
    assert (
        "2 of 5 copies fit now; 2 more start when room frees up; this cluster holds at most 4"
        in more
    )
    too_many = fit_words(as_bob, where, where_values(cluster, "1", 3))
    assert "1 of 3 copies fit now; this cluster holds at most 2 of this size" not in too_many
    assert "1 of 3 copies fit now; 1 more start when room frees up" in too_many


def test_a_copy_that_can_never_fit_says_why_and_what_to_change(as_bob, bob):
    cluster = cluster_of("small", card=T4, gpus=1)
    as_bob.post("/deployments/new/mode/", {"mode": "advanced", "next": "/deployments/"})
    big = model("Qwen/Qwen3-32B")
    where = start(as_bob, model=big.pk)
    values = where_values(cluster, "1", 1, variant=big.variants.get(name="awq-int4").pk)
    words = fit_words(as_bob, where, values)
    assert "No copy can ever fit on this cluster as it is." in words
    assert "Even on an empty cluster, no copy of this size fits." in words
    assert "Make each copy smaller" in words


def test_a_better_size_is_suggested_and_applied_with_one_click(as_bob, bob):
    cluster = cluster_of("lab")
    where = start(as_bob, model=model().pk)
    words = fit_words(as_bob, where, where_values(cluster, "1", 1))
    found = re.search(r'name="apply_size" value="([0-9.]+)"', as_bob.get(where).content.decode())
    assert found and "would fit better" in words
    applied = as_bob.post(where, {**where_values(cluster, "1", 1), "apply_size": found.group(1)})
    assert applied["Location"] == where
    html = as_bob.get(where).content.decode()
    assert re.search(rf'value="{re.escape(found.group(1))}"[^>]*checked', html)


def test_the_where_page_works_without_javascript_and_keeps_what_was_checked(as_bob, bob):
    cluster = cluster_of("lab")
    where = start(as_bob, model=model("Qwen/Qwen3-8B").pk)
    checked = as_bob.post(where, {**where_values(cluster, "1", 3), "action": "check"})
    assert checked["Location"] == where
    assert "2 of 3 copies fit now" in text(as_bob.get(where))


def test_next_with_a_bad_number_of_copies_stays_and_says_so(as_bob, bob):
    cluster = cluster_of("lab")
    where = start(as_bob, model=model().pk)
    response = as_bob.post(where, {**where_values(cluster, "1", 0), "action": "next"})
    assert response.status_code == 200
    assert "Ensure this value is greater than or equal to 1." in text(response)


# --- drafts --------------------------------------------------------------------------------------


def test_back_and_forward_keep_every_value(as_bob, bob, red):
    cluster = cluster_of("lab")
    where = start(as_bob, model=model().pk)
    settings = as_bob.post(where, {**where_values(cluster, "0.5", 3), "action": "next"})["Location"]
    as_bob.post(settings, {"editor_mode": "novice", "max_model_len": "2048", "action": "next"})
    review = step(where, "review")
    as_bob.post(
        review, {"name": "kept-name", "chat_name": "kept", "team": red.pk, "action": "back"}
    )
    back_at_settings = as_bob.get(settings).content.decode()
    assert 'value="2048"' in back_at_settings
    back = as_bob.post(
        settings, {"editor_mode": "novice", "max_model_len": "2048", "action": "back"}
    )
    assert back["Location"] == where
    html = as_bob.get(where).content.decode()
    assert re.search(r'value="0.5"[^>]*checked', html) and 'value="3"' in html
    forward = as_bob.get(review).content.decode()
    assert 'value="kept-name"' in forward and 'value="kept"' in forward


def test_a_reload_loses_nothing_and_two_tabs_keep_their_own_drafts(as_bob, bob):
    cluster = cluster_of("lab")
    first = start(as_bob, model=model().pk)
    second = start(as_bob, model=model().pk)
    assert first != second
    as_bob.post(first, {**where_values(cluster, "0.25", 4), "action": "check"})
    as_bob.post(second, {**where_values(cluster, "0.75", 1), "action": "check"})
    for _reload in range(2):
        assert re.search(r'value="0.25"[^>]*checked', as_bob.get(first).content.decode())
        assert re.search(r'value="0.75"[^>]*checked', as_bob.get(second).content.decode())
    assert 'value="4"' in as_bob.get(first).content.decode()


def test_a_draft_is_the_users_own(as_bob, bob, alice):
    cluster_of("lab")
    where = start(as_bob, model=model().pk)
    from tests.conftest import logged_in

    assert logged_in(alice).get(where).status_code == 404


# --- the variant novice mode picks -------------------------------------------------------------


@pytest.mark.parametrize(
    "card,vendor,picked,why",
    [
        (H100, "nvidia", "fp8", "FP8 runs natively"),
        (A100_40, "nvidia", "bf16", "It fits one accelerator at full precision."),
        (T4, "nvidia", "awq-int4", "Memory is short for full precision"),
        (("CPU", 64 * 2**30, ""), "cpu", "gguf-q4_k_m", "no CUDA GPU"),
    ],
)
def test_novice_picks_the_variant_that_suits_the_hardware(as_bob, bob, card, vendor, picked, why):
    cluster = cluster_of("hw", card=card, gpus=1, vendor=vendor)
    where = start(as_bob, model=model("Qwen/Qwen3-8B").pk, cluster=cluster.pk)
    page = text(as_bob.get(where))
    assert f"Variant: {picked}" in page and why in page


def test_changing_the_cluster_picks_again_without_a_reload(as_bob, bob):
    cluster_of("big")
    small = cluster_of("small", card=T4, gpus=1)
    where = start(as_bob, model=model("Qwen/Qwen3-8B").pk)
    assert "Variant: fp8" in text(as_bob.get(where))
    swapped = as_bob.post(where.replace("/where/", "/where/fit/"), where_values(small))
    assert '<div id="variant-area" hx-swap-oob="true">' in swapped.content.decode()
    assert "Variant: awq-int4" in text(swapped) and "Tesla-T4" in text(swapped)


def test_on_a_cpu_machine_guidance_never_offers_fp8_and_names_the_cpu_build(as_bob, bob):
    cluster_of("laptop", card=("CPU", 64 * 2**30, ""), gpus=1, vendor="cpu")
    page = text(as_bob.get(start(as_bob, model=model("Qwen/Qwen3-8B").pk)))
    per_copy = r"About [0-9.]+ GiB per copy at [0-9,]+ tokens:"
    assert re.search(rf"fp8 {per_copy} fp8 does not run on vLLM's CPU build", page)
    assert re.search(
        rf"bf16 {per_copy} runs on vLLM's CPU build in the machine's memory \(64.00 GiB", page
    )
    assert "runs natively" not in page


def test_each_variant_gets_vram_guidance(as_bob, bob):
    cluster_of("lab", card=T4, gpus=1)
    page = text(as_bob.get(start(as_bob, model=model("Qwen/Qwen3-8B").pk)))
    assert "Memory per variant" in page
    per_copy = r"About [0-9.]+ GiB per copy at [0-9,]+ tokens:"
    assert re.search(
        rf"bf16 {per_copy} needs compute capability 8.0; the accelerators here have 7.5", page
    )
    assert re.search(rf"fp8 {per_copy} needs compute capability 8.9", page)
    assert re.search(rf"awq-int4 {per_copy} fits one Tesla-T4 \(15.00 GiB\)", page)
    assert re.search(rf"gguf-q4_k_m {per_copy} fits one Tesla-T4", page)


def test_a_variant_too_large_for_any_accelerator_says_so(as_bob, bob):
    cluster_of("lab", card=A100_40, gpus=1)
    page = text(as_bob.get(start(as_bob, model=model("Qwen/Qwen3-32B").pk)))
    assert re.search(r"bf16 About [0-9.]+ GiB per copy at [0-9,]+ tokens: does not fit", page)


# --- review --------------------------------------------------------------------------------------


def reach_review(client, cluster, repo="Qwen/Qwen3-0.6B") -> str:
    where = start(client, model=model(repo).pk)
    settings = client.post(where, {**where_values(cluster, "0.25", 1), "action": "next"})[
        "Location"
    ]
    return client.post(
        settings, {"editor_mode": "novice", "max_model_len": "4096", "action": "next"}
    )["Location"]


def test_the_proposed_name_is_unique(as_bob, bob, red):
    cluster = cluster_of("lab")
    factories.make_deployment("qwen3-0-6b", red, cluster=cluster, model=model())
    html = as_bob.get(reach_review(as_bob, cluster)).content.decode()
    assert 'value="qwen3-0-6b-2"' in html


@pytest.mark.parametrize(
    "name,words",
    [
        ("Not A Slug", "use lowercase letters, digits and dashes"),
        ("taken", "a deployment named taken exists already; pick another name"),
    ],
)
def test_a_bad_name_is_refused_and_nothing_is_created(as_bob, bob, red, name, words):
    cluster = cluster_of("lab")
    factories.make_deployment("taken", red, cluster=cluster, model=model())
    review = reach_review(as_bob, cluster)
    response = as_bob.post(
        review, {"name": name, "chat_name": "", "team": red.pk, "action": "host"}
    )
    assert response.status_code == 200 and words in text(response)
    assert Deployment.objects.count() == 1


def test_bob_may_host_only_in_the_team_he_operates(as_bob, bob, red, blue):
    cluster = cluster_of("lab")
    review = reach_review(as_bob, cluster)
    response = as_bob.post(
        review, {"name": "in-blue", "chat_name": "", "team": blue.pk, "action": "host"}
    )
    assert "Select a valid choice" in text(response)
    assert not Deployment.objects.filter(name="in-blue").exists()


# --- who may open it -----------------------------------------------------------------------------


def test_viewers_and_outsiders_cannot_open_the_wizard(as_carol, as_dave, carol, dave):
    cluster_of("lab")
    for client in (as_carol, as_dave):
        assert client.get("/deployments/new/").status_code == 403
        assert client.get("/deployments/new/", {"model": model().pk}).status_code == 403


def test_a_platform_admin_may_host_in_any_team(as_alice, alice, red, blue):
    cluster = cluster_of("lab")
    html = as_alice.get(reach_review(as_alice, cluster)).content.decode()
    assert ">blue</option>" in html and ">red</option>" in html


def half_gpu_copy(name: str, team, cluster: Cluster) -> None:
    """A deployment of another model whose one copy holds half a GPU (as placing it would)."""
    holder = factories.make_deployment(name, team, cluster=cluster, model=model("Qwen/Qwen3-8B"),
                                       accelerators_per_copy="0.5")  # fmt: skip
    placing.reserve(holder, [factories.make_copy(holder)])


def test_a_copy_that_fits_only_after_moves_offers_them_and_hosts_with_them_accepted(
    as_bob, bob, red, blue
):
    cluster = cluster_of("frag")
    half_gpu_copy("ours", red, cluster)  # on GPU 0, and another team's on GPU 1
    theirs = factories.make_deployment("theirs", blue, cluster=cluster,
                                       model=model("Qwen/Qwen3-8B"), accelerators_per_copy="0.5")  # fmt: skip
    copy = factories.make_copy(theirs)
    gpu1 = Accelerator.objects.get(machine__cluster=cluster, index=1)
    Reservation.objects.create(copy=copy, machine=gpu1.machine, accelerator=gpu1,
                               reserved_bytes=gpu1.memory_bytes // 2, share="0.5")  # fmt: skip
    where = start(as_bob, model=model().pk)
    words = fit_words(as_bob, where, where_values(cluster, "1", 1))
    assert (
        "Fits after moving 1 copy: ours copy 0 (frag-1 GPU 0 → frag-1 GPU 1); no downtime: each "
        "starts at its new place before the old one stops. Move these copies to make room"
    ) in words
    settings = as_bob.post(where, {**where_values(cluster, "1", 1), "allow_moves": "on",
                                   "action": "next"})  # fmt: skip
    review = as_bob.post(settings["Location"], {"editor_mode": "novice", "max_model_len": "4096",
                                                "action": "next"})  # fmt: skip
    page = text(as_bob.get(review["Location"]))
    assert "Accepted: Fits after moving 1 copy: ours copy 0 (frag-1 GPU 0 → frag-1 GPU 1)" in page
    as_bob.post(review["Location"], {"name": "whole", "chat_name": "", "revision": "",
                                     "team": red.pk, "action": "host"})  # fmt: skip
    assert Deployment.objects.get(name="whole").make_room is True


def test_moves_not_ticked_are_not_made(as_bob, bob, red):
    cluster = cluster_of("lab")
    where = start(as_bob, model=model().pk)
    settings = as_bob.post(where, {**where_values(cluster, "1", 1), "action": "next"})
    review = as_bob.post(settings["Location"], {"editor_mode": "novice", "max_model_len": "4096",
                                                "action": "next"})  # fmt: skip
    assert "Accepted:" not in text(as_bob.get(review["Location"]))
    as_bob.post(review["Location"], {"name": "plain", "chat_name": "", "revision": "",
                                     "team": red.pk, "action": "host"})  # fmt: skip
    assert Deployment.objects.get(name="plain").make_room is False
