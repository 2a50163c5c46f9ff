"""`manage.py make_tiny_model`: the tiny Llama written under the models folder and catalogued
with a safetensors variant for vLLM and a GGUF variant for llama.cpp, both ready; running it
again changes nothing."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from catalog.models import Model, ServerModel, Variant

pytestmark = pytest.mark.django_db

SAFETENSORS_FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
]


@pytest.fixture
def models_dir(settings, tmp_path):
    settings.MODELS_DIR = tmp_path / "models"
    return settings.MODELS_DIR


def make_tiny_model(capsys) -> str:
    call_command("make_tiny_model")
    return capsys.readouterr().out


def snapshot(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_the_command_writes_the_model_under_the_models_folder_and_says_so(models_dir, capsys):
    out = make_tiny_model(capsys)
    folder = (models_dir / "berth" / "tiny-llama").resolve()
    assert out == (
        f"Tiny model written to {folder}: berth/tiny-llama is in the catalog with variants "
        "gguf, safetensors, both ready on this server.\n"
    )
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*SAFETENSORS_FILES, "tiny-llama-f32.gguf"]
    )


def test_it_registers_one_model_with_the_real_architecture_facts(models_dir, capsys):
    make_tiny_model(capsys)
    model = Model.objects.get()
    assert (model.repo_id, model.name, model.family) == ("berth/tiny-llama", "tiny-llama", "Llama")
    assert model.architecture == "LlamaForCausalLM"
    assert (model.layers, model.attention_heads, model.kv_heads, model.head_dim) == (2, 4, 2, 64)
    assert (model.hidden_size, model.vocab_size, model.max_context) == (256, 512, 2048)
    assert model.params_total == model.params_active == 1_443_072
    assert (model.native_dtype, model.tasks) == ("float32", ["chat"])


def test_it_adds_a_safetensors_variant_for_vllm_and_a_gguf_variant_for_llama_cpp(
    models_dir, capsys
):
    make_tiny_model(capsys)
    folder = models_dir / "berth" / "tiny-llama"
    safetensors = Variant.objects.get(name="safetensors")
    assert (safetensors.format, safetensors.engine, safetensors.precision) == (
        "safetensors",
        "vllm",
        "fp32",
    )
    assert safetensors.size_bytes == (folder / "model.safetensors").stat().st_size
    gguf = Variant.objects.get(name="gguf")
    assert (gguf.format, gguf.engine, gguf.gguf_file) == ("gguf", "llamacpp", "tiny-llama-f32.gguf")
    assert gguf.size_bytes == (folder / "tiny-llama-f32.gguf").stat().st_size
    assert Variant.objects.filter(size_estimated=False, repo_id="berth/tiny-llama").count() == 2


def test_each_variant_is_ready_on_this_server_with_its_files_and_their_sizes(models_dir, capsys):
    make_tiny_model(capsys)
    folder = (models_dir / "berth" / "tiny-llama").resolve()
    rows = {row.variant.name: row for row in ServerModel.objects.select_related("variant")}
    assert set(rows) == {"safetensors", "gguf"}
    for row in rows.values():
        assert (row.state, row.path, row.revision) == ("ready", str(folder), "local")
        assert row.files == [[name, (folder / name).stat().st_size] for name, _ in row.files]
        assert row.size_bytes == row.progress_bytes == sum(size for _, size in row.files)
    assert sorted(name for name, _ in rows["safetensors"].files) == SAFETENSORS_FILES
    assert [name for name, _ in rows["gguf"].files] == ["tiny-llama-f32.gguf"]


def test_running_it_twice_writes_the_same_files_and_adds_no_rows(models_dir, capsys):
    make_tiny_model(capsys)
    folder = models_dir / "berth" / "tiny-llama"
    files, rows = snapshot(folder), list(ServerModel.objects.values_list("pk", "files"))
    variants = list(Variant.objects.values_list("pk", "name", "size_bytes"))
    second = make_tiny_model(capsys)
    assert "berth/tiny-llama is in the catalog" in second
    assert snapshot(folder) == files
    assert (Model.objects.count(), Variant.objects.count(), ServerModel.objects.count()) == (
        1,
        2,
        2,
    )
    assert list(Variant.objects.values_list("pk", "name", "size_bytes")) == variants
    assert list(ServerModel.objects.values_list("pk", "files")) == rows


def test_running_it_again_brings_back_missing_files_and_makes_their_copy_ready(models_dir, capsys):
    make_tiny_model(capsys)
    folder = models_dir / "berth" / "tiny-llama"
    (folder / "tiny-llama-f32.gguf").unlink()
    ServerModel.objects.filter(variant__name="gguf").update(state="must_redownload", error="gone")
    make_tiny_model(capsys)
    row = ServerModel.objects.get(variant__name="gguf")
    assert (row.state, row.error) == ("ready", "")
    assert (folder / "tiny-llama-f32.gguf").stat().st_size == row.size_bytes
