"""The tiny model's writer: the same bytes every run, files both engines can read, and a GGUF
that holds the safetensors' weights in llama.cpp's names and rotary layout."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from safetensors import safe_open
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from catalog import tiny_model
from catalog.config_facts import read_facts
from catalog.tiny_model import GGUF_FILE, SAFETENSORS_FILE, TinyModel, write_tiny_model

CONVERSATION = [
    {"role": "system", "content": "You answer in one word."},
    {"role": "user", "content": "What colour is the sky?"},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "And the grass?"},
]


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> TinyModel:
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="module")
def config(written) -> dict:
    return json.loads((written.folder / "config.json").read_text())


@pytest.fixture(scope="module")
def reader(written) -> gguf.GGUFReader:
    return gguf.GGUFReader(written.folder / GGUF_FILE)


def field(reader: gguf.GGUFReader, key: str):
    return reader.fields[key].contents()


def render(template: str, messages: list[dict], add_generation_prompt: bool) -> str:
    # The environment transformers renders chat templates in.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(
        messages=messages, add_generation_prompt=add_generation_prompt
    )


def test_two_runs_into_two_folders_write_identical_bytes_in_every_file(tmp_path, written):
    again = write_tiny_model(tmp_path / "again")
    assert again.files == written.files
    for name, _ in written.files:
        assert (again.folder / name).read_bytes() == (written.folder / name).read_bytes(), name


def test_the_folder_holds_exactly_the_files_listed_with_their_sizes(written):
    on_disk = sorted((p.name, p.stat().st_size) for p in written.folder.iterdir())
    assert list(written.files) == on_disk
    assert [name for name, _ in written.files] == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tiny-llama-f32.gguf",
        "tokenizer.json",
        "tokenizer_config.json",
    ]


def test_config_json_describes_a_small_llama_with_head_dim_64(config, written):
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert (config["num_hidden_layers"], config["num_attention_heads"]) == (2, 4)
    assert (config["num_key_value_heads"], config["head_dim"]) == (2, 64)
    assert (config["hidden_size"], config["vocab_size"]) == (256, 512)
    assert config["max_position_embeddings"] == 2048
    assert config["torch_dtype"] == "float32"
    assert config["tie_word_embeddings"] is False
    assert (written.layers, written.kv_heads, written.head_dim) == (2, 2, 64)


def test_the_json_files_are_written_with_sorted_keys(written):
    for name in ["config.json", "tokenizer_config.json", "generation_config.json"]:
        text = (written.folder / name).read_text()
        assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n", name


def test_the_safetensors_tensors_have_the_shapes_of_a_256_wide_two_layer_llama(written):
    tensors = load_file(written.folder / SAFETENSORS_FILE)
    # [out, in]: 4 query heads of 64 are 256 rows, 2 key-value heads of 64 are 128 rows.
    expected = {
        "model.embed_tokens.weight": (512, 256),
        "model.norm.weight": (256,),
        "lm_head.weight": (512, 256),
    }
    for i in range(2):
        layer = f"model.layers.{i}"
        expected |= {
            f"{layer}.self_attn.q_proj.weight": (256, 256),
            f"{layer}.self_attn.k_proj.weight": (128, 256),
            f"{layer}.self_attn.v_proj.weight": (128, 256),
            f"{layer}.self_attn.o_proj.weight": (256, 256),
            f"{layer}.mlp.gate_proj.weight": (512, 256),
            f"{layer}.mlp.up_proj.weight": (512, 256),
            f"{layer}.mlp.down_proj.weight": (256, 512),
            f"{layer}.input_layernorm.weight": (256,),
            f"{layer}.post_attention_layernorm.weight": (256,),
        }
    assert {name: t.shape for name, t in tensors.items()} == expected
    assert {t.dtype for t in tensors.values()} == {np.dtype("float32")}
    # Two 512 × 256 embeddings, 590,336 in each layer, and the final norm's 256.
    assert sum(t.size for t in tensors.values()) == written.params_total == 1_443_072


def test_the_safetensors_file_says_it_is_in_pytorch_format_as_vllm_expects(written):
    with safe_open(written.folder / SAFETENSORS_FILE, framework="numpy") as opened:
        assert opened.metadata() == {"format": "pt"}


def test_the_norms_are_ones_and_the_other_weights_small_and_random(written):
    tensors = load_file(written.folder / SAFETENSORS_FILE)
    assert np.all(tensors["model.norm.weight"] == 1.0)
    embed = tensors["model.embed_tokens.weight"]
    assert 0.015 < embed.std() < 0.025
    assert not np.array_equal(embed, tensors["lm_head.weight"])


def test_the_tokenizer_has_512_tokens_and_the_special_ones_at_the_ids_config_json_names(
    config, written
):
    tokenizer = Tokenizer.from_file(str(written.folder / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == config["vocab_size"] == 512
    assert tokenizer.token_to_id("<|begin_of_text|>") == config["bos_token_id"] == 0
    assert tokenizer.token_to_id("<|end_of_text|>") == config["eos_token_id"] == 1
    assert tokenizer.token_to_id("<|im_start|>") == 2
    assert tokenizer.token_to_id("<|im_end|>") == 3
    text = "Hello! How are you today? Zebras quack 12345."
    assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_the_tokenizer_reads_special_tokens_in_a_prompt_as_one_token_each(written):
    tokenizer = Tokenizer.from_file(str(written.folder / "tokenizer.json"))
    ids = tokenizer.encode("<|im_start|>user\nhello<|im_end|>\n").ids
    assert ids[0] == 2 and 3 in ids
    assert tokenizer.encode("hello").ids[0] != 0  # no beginning-of-text token is added


def test_the_tokenizer_config_names_the_fast_tokenizer_and_its_special_tokens(written):
    settings = json.loads((written.folder / "tokenizer_config.json").read_text())
    assert settings["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (settings["bos_token"], settings["eos_token"]) == (
        "<|begin_of_text|>",
        "<|end_of_text|>",
    )
    assert settings["model_max_length"] == 2048
    generation = json.loads((written.folder / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [1, 3]


def test_the_chat_template_renders_the_messages_in_order_and_the_generation_prompt(written):
    settings = json.loads((written.folder / "tokenizer_config.json").read_text())
    rendered = render(settings["chat_template"], CONVERSATION, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nYou answer in one word.<|im_end|>\n"
        "<|im_start|>user\nWhat colour is the sky?<|im_end|>\n"
        "<|im_start|>assistant\nBlue.<|im_end|>\n"
        "<|im_start|>user\nAnd the grass?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_the_chat_template_leaves_the_generation_prompt_out_when_not_asked(written):
    settings = json.loads((written.folder / "tokenizer_config.json").read_text())
    rendered = render(settings["chat_template"], CONVERSATION[:2], add_generation_prompt=False)
    assert rendered.endswith("<|im_start|>user\nWhat colour is the sky?<|im_end|>\n")
    assert "assistant" not in rendered


def test_the_gguf_reads_back_as_a_llama_with_the_config_hyperparameters(reader, config):
    assert field(reader, "general.architecture") == "llama"
    assert field(reader, "llama.block_count") == config["num_hidden_layers"] == 2
    assert field(reader, "llama.attention.head_count") == config["num_attention_heads"] == 4
    assert field(reader, "llama.attention.head_count_kv") == config["num_key_value_heads"] == 2
    assert field(reader, "llama.embedding_length") == config["hidden_size"] == 256
    assert field(reader, "llama.feed_forward_length") == config["intermediate_size"] == 512
    assert field(reader, "llama.context_length") == config["max_position_embeddings"] == 2048
    assert field(reader, "llama.rope.dimension_count") == config["head_dim"] == 64
    assert field(reader, "llama.rope.freq_base") == config["rope_theta"] == 10000.0
    assert field(reader, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert field(reader, "general.file_type") == gguf.LlamaFileType.ALL_F32


def test_the_gguf_names_every_tensor_as_llama_cpp_does(reader):
    per_layer = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
    per_layer += ["attn_norm", "ffn_norm"]
    expected = {"token_embd.weight", "output_norm.weight", "output.weight"}
    expected |= {f"blk.{i}.{name}.weight" for i in range(2) for name in per_layer}
    assert {t.name for t in reader.tensors} == expected
    shapes = {t.name: list(t.shape) for t in reader.tensors}
    # GGUF lists dims innermost first: HF's [out, in] is [in, out] here.
    assert shapes["token_embd.weight"] == [256, 512]
    assert shapes["blk.0.attn_k.weight"] == [256, 128]
    assert shapes["blk.1.ffn_down.weight"] == [512, 256]


def test_the_gguf_holds_the_same_weights_with_queries_and_keys_permuted(reader, written):
    tensors = load_file(written.folder / SAFETENSORS_FILE)
    found = {t.name: np.asarray(t.data) for t in reader.tensors}
    assert np.array_equal(
        found["blk.1.ffn_up.weight"], tensors["model.layers.1.mlp.up_proj.weight"]
    )
    q = tensors["model.layers.0.self_attn.q_proj.weight"]
    k = tensors["model.layers.0.self_attn.k_proj.weight"]
    assert np.array_equal(found["blk.0.attn_q.weight"], tiny_model.permute(q, 4))
    assert np.array_equal(found["blk.0.attn_k.weight"], tiny_model.permute(k, 2))
    assert not np.array_equal(found["blk.0.attn_q.weight"], q)


def rope_rotate_half(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Hugging Face / vLLM (neox style): dimension i turns with dimension i + half."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    cos, sin = np.cos(angles), np.sin(angles)
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def rope_interleaved(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """llama.cpp's LLAMA_ROPE_TYPE_NORM: dimension 2i turns with dimension 2i + 1."""
    a, b = x[..., 0::2], x[..., 1::2]
    cos, sin = np.cos(angles), np.sin(angles)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, b * cos + a * sin
    return out


def test_interleaved_rope_on_the_permuted_keys_gives_the_same_attention_scores(written):
    tensors = load_file(written.folder / SAFETENSORS_FILE)
    q_hf = tensors["model.layers.0.self_attn.q_proj.weight"]
    k_hf = tensors["model.layers.0.self_attn.k_proj.weight"]
    q_cpp, k_cpp = tiny_model.permute(q_hf, 4), tiny_model.permute(k_hf, 2)
    x = np.random.default_rng(7).standard_normal((5, 256)).astype(np.float32)
    angles = np.arange(5)[:, None, None] * 10000.0 ** (-np.arange(32) / 32)
    heads = {}
    for name, (q, k, rope) in {
        "hf": (q_hf, k_hf, rope_rotate_half),
        "cpp": (q_cpp, k_cpp, rope_interleaved),
    }.items():
        queries = rope((x @ q.T).reshape(5, 4, 64), angles)
        keys = rope((x @ k.T).reshape(5, 2, 64), angles)
        heads[name] = np.einsum("thd,skd->thsk", queries, keys)  # every query·key score
    assert np.allclose(heads["hf"], heads["cpp"], atol=1e-4)


def test_the_gguf_vocabulary_is_the_tokenizers_with_the_gpt_2_pre_tokenizer(reader, written):
    tokenizer = Tokenizer.from_file(str(written.folder / "tokenizer.json"))
    assert field(reader, "tokenizer.ggml.model") == "gpt2"
    assert field(reader, "tokenizer.ggml.pre") == "gpt-2"  # llama-server refuses "gpt2"
    tokens = field(reader, "tokenizer.ggml.tokens")
    assert tokens == [tokenizer.id_to_token(i) for i in range(512)]
    types = field(reader, "tokenizer.ggml.token_type")
    assert types[:4] == [gguf.TokenType.CONTROL] * 4
    assert set(types[4:]) == {gguf.TokenType.NORMAL}
    assert len(field(reader, "tokenizer.ggml.merges")) == 252  # 512 less 256 bytes and 4 special
    assert field(reader, "tokenizer.ggml.bos_token_id") == 0
    assert field(reader, "tokenizer.ggml.eos_token_id") == 1
    assert field(reader, "tokenizer.chat_template") == tiny_model.CHAT_TEMPLATE


def test_a_tied_shape_has_no_lm_head_and_says_so_in_its_config():
    tied = tiny_model.Shape(vocab_size=600, tie_word_embeddings=True)
    weights = tiny_model.random_weights(tied)
    assert "lm_head.weight" not in weights
    assert weights["model.embed_tokens.weight"].shape == (600, tied.hidden_size)
    assert tiny_model.hf_config(tied)["tie_word_embeddings"] is True


def test_qwen3_0_6b_s_shape_has_its_config_dimensions_and_0_6_billion_parameters():
    shape = tiny_model.QWEN3_0_6B
    config = tiny_model.hf_config(shape)
    assert (config["num_hidden_layers"], config["hidden_size"], config["head_dim"]) == (
        28,
        1024,
        128,
    )
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (16, 8)
    assert (config["vocab_size"], config["tie_word_embeddings"]) == (151936, True)
    # One layer drawn for real (the whole model would be 2.4 GB of float32).
    layer = tiny_model.layer_weights(np.random.default_rng(0), 0, shape)
    assert tiny_model.parameter_count(layer) == 15_730_688
    # Qwen3-0.6B's safetensors hold 596,049,920; the catalog's count from config.json leaves out
    # the norms (57,344 in the layers, 1,024 at the end) and this plain Llama has no q/k norms
    # (7,168), which leaves 595,984,384.
    assert read_facts(config).params_total == 595_984_384


def test_only_the_tiny_shape_is_written_as_a_gguf(tmp_path):
    small = tiny_model.Shape(hidden_size=128, intermediate_size=256, heads=2, kv_heads=1)
    written = write_tiny_model(tmp_path / "small", small)
    assert written.gguf_file == ""
    assert not (tmp_path / "small" / GGUF_FILE).exists()
    assert written.hidden_size == 128
