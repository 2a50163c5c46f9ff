"""The demo seed and the catalog: idempotent, complete, and loud about bad data."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from catalog.models import Model, ServerModel, Variant
from clusters.models import Accelerator, Cluster, Machine
from console.models import Membership

pytestmark = pytest.mark.django_db


def counts() -> tuple[int, ...]:
    return tuple(
        m.objects.count()
        for m in (Model, Variant, ServerModel, Cluster, Machine, Accelerator, Membership)
    )


def test_seed_demo_creates_the_demo_and_running_it_again_changes_nothing(capsys):
    call_command("seed_demo")
    out = capsys.readouterr().out
    assert "admin     berth-admin" in out and "viewer    berth-viewer" in out
    first = counts()
    call_command("seed_demo")
    assert counts() == first
    cluster = Cluster.objects.get(name="demo")
    gpus = Accelerator.objects.filter(machine__cluster=cluster, parent__isnull=True)
    assert gpus.filter(product="NVIDIA-H100-80GB-HBM3").count() == 8
    assert gpus.filter(product="NVIDIA-L4", sharing_class="time_sliced", replicas=4).count() == 2
    h200 = gpus.get(product="NVIDIA-H200")
    assert [s.mig_profile for s in h200.slices.order_by("index")] == [
        "3g.71gb",
        "2g.35gb",
        "1g.18gb",
        "1g.18gb",
    ]
    assert ServerModel.objects.filter(state="ready").count() >= 3


def test_the_demo_logins_work(client):
    call_command("seed_demo")
    for username, password in [
        ("admin", "berth-admin"),
        ("operator", "berth-operator"),
        ("viewer", "berth-viewer"),
    ]:
        page = client.post("/login/", {"username": username, "password": password})
        assert page.status_code == 302, username  # logged in: on to the console
        client.logout()


def test_the_catalog_has_at_least_15_models_with_their_common_variants():
    call_command("load_catalog")
    assert Model.objects.count() >= 15
    qwen = Model.objects.get(repo_id="Qwen/Qwen3-8B")
    assert (qwen.layers, qwen.kv_heads, qwen.head_dim) == (36, 8, 128)
    assert {"bf16", "fp8", "awq-int4", "gguf-q4_k_m"} <= set(
        qwen.variants.values_list("name", flat=True)
    )
    assert qwen.variants.get(name="fp8").min_compute_capability == "8.9"
    assert qwen.variants.get(name="gguf-q4_k_m").engine == "llamacpp"
    deepseek = Model.objects.get(repo_id="deepseek-ai/DeepSeek-V3")
    assert deepseek.mla == {"kv_lora_rank": 512, "qk_rope_head_dim": 64}


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda m: m.pop("layers"), "Qwen/Qwen3-8B: missing layers"),
        (lambda m: m.update(layers="36"), "layers must be a positive whole number"),
        (lambda m: m.update(kv_heads=-8), "kv_heads must be a positive whole number"),
        (lambda m: m.update(variants=[]), "has no variants"),
        (lambda m: m["variants"][0].update(engine="tgi"), "engine must be one of"),
        (lambda m: m["variants"][0].update(bytes=0), "bytes must be a positive whole number"),
    ],
)
def test_a_bad_catalog_entry_is_named_and_nothing_is_loaded(tmp_path, change, message):
    from catalog.loader import CATALOG_FILE

    data = json.loads(CATALOG_FILE.read_text())
    entry = next(m for m in data["models"] if m["repo_id"] == "Qwen/Qwen3-8B")
    change(entry)
    bad = tmp_path / "models.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(CommandError, match=message):
        call_command("load_catalog", "--file", str(bad))
    assert Model.objects.count() == 0


def test_an_unreadable_catalog_file_is_named(tmp_path):
    bad = tmp_path / "models.json"
    bad.write_text("{not json")
    with pytest.raises(CommandError, match="cannot read the catalog"):
        call_command("load_catalog", "--file", str(bad))
