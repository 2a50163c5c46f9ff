"""The emulated Hugging Face hub for the catalog's tests, and the small repositories it serves.

Repositories are generated per test: config.json (the upstream file of a catalog model, from
fixtures/), tokenizer files, a small safetensors file (written with the safetensors package)
and a GGUF file (written with the gguf package).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from safetensors.numpy import save as save_safetensors

from tests.hub.server import Commit, EmulatedHub, Repo

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHAT_TEMPLATE = (
    "{%- if tools %}{{ tools | tojson }}{%- endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
    "{%- if enable_thinking is false %}<think>\n\n</think>{% endif %}"
)


def upstream_config(repo_id: str) -> dict[str, Any]:
    """The config.json of a catalog model, as its repository publishes it."""
    return json.loads((FIXTURES / f"{repo_id.replace('/', '--')}.json").read_text())


def config_files(repo_id: str = "Qwen/Qwen3-0.6B") -> dict[str, bytes]:
    tokenizer = {"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}}
    return {
        "config.json": json.dumps(upstream_config(repo_id)).encode(),
        "generation_config.json": b'{"do_sample": true}',
        "tokenizer.json": json.dumps(tokenizer).encode(),
        "tokenizer_config.json": json.dumps({"chat_template": CHAT_TEMPLATE}).encode(),
        "README.md": b"# A tiny test model\n",
    }


def safetensors_bytes(megabytes: float = 1.0, seed: int = 0) -> bytes:
    """A real safetensors file of about this size (random bf16-sized float16 weights)."""
    rows = max(1, int(megabytes * 2**20 / (2 * 1024)))
    weights = np.random.default_rng(seed).standard_normal((rows, 1024)).astype(np.float16)
    return save_safetensors({"model.embed_tokens.weight": weights})


def gguf_bytes(kilobytes: int = 256) -> bytes:
    """A real GGUF file (header, metadata and one tensor) written by the gguf package."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.gguf"
        writer = gguf.GGUFWriter(path, "qwen3")
        writer.add_block_count(28)
        writer.add_context_length(40960)
        writer.add_tensor("token_embd.weight", np.ones((kilobytes, 256), dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()


def safetensors_repo(
    repo_id: str, megabytes: float = 1.0, config_of: str = "Qwen/Qwen3-0.6B", **fields: Any
) -> Repo:
    files = {**config_files(config_of), "model.safetensors": safetensors_bytes(megabytes)}
    card = fields.pop("card", {"license": "apache-2.0"})
    return Repo(repo_id, [Commit(files)], card=card, **fields)


def gguf_repo(repo_id: str, base_model: str = "", **fields: Any) -> Repo:
    files = {"Tiny-Q4_K_M.gguf": gguf_bytes(), "README.md": b"# GGUF\n"}
    card = {"license": "apache-2.0", **({"base_model": base_model} if base_model else {})}
    return Repo(repo_id, [Commit(files)], card=card, **fields)


@contextmanager
def running_hub() -> Iterator[EmulatedHub]:
    hub = EmulatedHub().start()
    try:
        yield hub
    finally:
        hub.stop()
