"""``vllm serve`` argv: the flags the simulator models, and every other flag kept as ignored.

The parser mirrors vLLM's FlexibleArgumentParser where Berth depends on it: ``--flag_name`` is
``--flag-name``, ``--flag=value`` works, ``--max-model-len`` reads ``1k``/``1K``/``auto``, and an
invalid choice exits 2 with argparse's message. Any other flag vLLM has (``--swap-space 16``,
``--trust-remote-code``, ``-cc.pass_config.x=True``) is accepted and reported as ignored, so a
launcher can pass the argv it would pass to vLLM; a flag the simulated vLLM version does not
have is refused as vLLM refuses it (exit 2, "unrecognized arguments"), where a flag list of that
version exists (deployments/engine/flags, generated from vLLM's own argument definitions: data
read by path, not code imported, so the simulator stays below the layers that use it).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path

DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
KV_CACHE_DTYPES = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "int4_per_token_head",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
)
RUNNERS = ("auto", "generate", "pooling", "draft")
CONVERTS = ("auto", "none", "embed", "classify", "reward")
TASKS = (
    "auto",
    "generate",
    "embedding",
    "embed",
    "classify",
    "score",
    "reward",
    "transcription",
    "draft",
)
POOLING_TASKS = ("embedding", "embed", "classify", "score", "reward")
_HUMAN_INT = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgG]?)$")


def human_readable_int(text: str) -> int:
    """vLLM's reading of sizes: 1k = 1000, 1K = 1024, 25.6k = 25,600; -1 / auto = auto (-1)."""
    if text.strip().lower() in ("auto", "-1"):
        return -1
    match = _HUMAN_INT.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"invalid size: {text!r}")
    number, suffix = match.groups()
    if not suffix:
        if "." in number:
            raise argparse.ArgumentTypeError(f"invalid size: {text!r}")
        return int(number)
    base = 1000 if suffix.islower() else 1024
    power = "kmg".index(suffix.lower()) + 1
    return int(float(number) * base**power)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm", allow_abbrev=False)
    parser.add_argument("-v", "--version", action="store_true")
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", prog="vllm serve", allow_abbrev=False)
    add_serve_flags(serve)
    return parser


def add_serve_flags(serve: argparse.ArgumentParser) -> None:
    add = serve.add_argument
    add("model_tag", nargs="?", default=None)
    add("--model", default=None)
    add("--host", default=None)
    add("--port", type=int, default=8000)
    add("--uds", default=None)  # a Unix socket to listen on; --host and --port are then ignored
    add("--api-key", action="append", default=None)
    add("--served-model-name", nargs="+", default=None)
    add("--max-model-len", type=human_readable_int, default=None)
    add("--gpu-memory-utilization", type=float, default=0.9)
    add("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    add("--kv-cache-memory-bytes", type=human_readable_int, default=0)
    add("--block-size", type=int, default=16)
    add("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    add("--max-num-seqs", type=int, default=None)
    add("--max-num-batched-tokens", type=human_readable_int, default=None)
    add("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None)
    add("--enforce-eager", action="store_true")
    add("-tp", "--tensor-parallel-size", type=int, default=1)
    add("-pp", "--pipeline-parallel-size", type=int, default=1)
    add("--dtype", choices=DTYPES, default="auto")
    add("--runner", choices=RUNNERS, default="auto")
    add("--convert", choices=CONVERTS, default="auto")
    add("--task", choices=TASKS, default=None)
    add("--disable-log-stats", action="store_true")
    add("--disable-uvicorn-access-log", action="store_true")


FLAG_LISTS = Path(__file__).resolve().parents[2] / "deployments" / "engine" / "flags"


def known_options(version: str) -> set[str] | None:
    """Every option of `vllm serve` in that version; None when no list of it exists."""
    path = FLAG_LISTS / f"vllm-{version}.json"
    if not path.is_file():
        return None
    return {option for entry in json.loads(path.read_text())["flags"] for option in entry["flags"]}


def is_known(flag: str, known: set[str]) -> bool:
    """`--compilation-config.x=1` is `--compilation-config`'s; `--no-x` negates `--x`."""
    name = flag.split("=", 1)[0].split(".", 1)[0]
    return name in known or (name.startswith("--no-") and "--" + name[5:] in known)


def unrecognized(ignored: Sequence[Sequence[str]], version: str) -> list[str]:
    """The tokens vLLM's parser would leave over, as its error lists them."""
    known = known_options(version)
    if known is None:
        return []
    return [token for group in ignored if not is_known(group[0], known) for token in group]


def normalise(argv: Sequence[str]) -> list[str]:
    """``--max_model_len=4k`` → ``--max-model-len=4k``, as FlexibleArgumentParser does."""
    result = []
    for token in argv:
        name, sep, value = token.partition("=")
        result.append(name.replace("_", "-") + sep + value if token.startswith("--") else token)
    return result


def group_ignored(extra: Sequence[str]) -> list[list[str]]:
    """Split leftover tokens into flags, each with the values that followed it."""
    groups: list[list[str]] = []
    for token in extra:
        is_flag = token.startswith("-") and not _is_number(token)
        if is_flag or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return groups


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def parse_argv(argv: Sequence[str]) -> tuple[argparse.Namespace, list[list[str]]]:
    """Parse the whole command line; argparse exits 2 on a bad value, as vLLM's does."""
    namespace, extra = build_parser().parse_known_args(normalise(argv))
    return namespace, group_ignored(extra)


def is_pooling(namespace: argparse.Namespace, encoder_only: bool, architecture: str) -> bool:
    """vLLM's runner choice: pooling when asked, or when the architecture is a bare encoder."""
    if namespace.runner == "pooling" or namespace.task in POOLING_TASKS:
        return True
    if namespace.convert in ("embed", "classify", "reward"):
        return True
    if namespace.runner == "generate":
        return False
    return encoder_only or architecture.endswith("Model") or "Embedding" in architecture
