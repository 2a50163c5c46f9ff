"""The vLLM flag lists (generated from the wheels by scripts/vllm_flags.py) and the settings
catalog the editor stores: the flags of reference/vllm.md §1.1 are there with their defaults,
every editor setting validates and renders, and the generator reads argument definitions with
`ast` from a wheel."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from catalog.facts import MEMORY_SETTINGS
from deployments.engine import versions
from deployments.engine.argv import flag_arguments
from deployments.engine.settings import CATALOG, EngineSettingsError, validate_settings
from scripts import vllm_flags

ANY = object()
OLD, NEW = "0.16.0", "0.32.0"
# reference/vllm.md §1.1: flag → (what to compare, the default it gives). "default" is vLLM's
# argparse default; "effective" is the config field's default where argparse leaves None so
# that vLLM can tell "not given" (prefix caching, chunked prefill).
CORE_FLAGS = {
    "model_tag": ("default", None),
    "--model": ("default", ANY),  # Qwen/Qwen3-0.6B in main, facebook/opt-125m in older releases
    "--revision": ("default", None),
    "--served-model-name": ("default", None),
    "--dtype": ("default", "auto"),
    "--quantization": ("default", None),
    "-q": ("default", None),
    "--trust-remote-code": ("default", False),
    "--max-model-len": ("default", None),
    "--kv-cache-dtype": ("default", "auto"),
    "--kv-cache-memory-bytes": ("default", None),
    "--enable-prefix-caching": ("effective", True),
    "--max-num-seqs": ("default", None),  # resolved per usage context: 256 for the API server
    "--max-num-batched-tokens": ("default", None),  # resolved per usage context: 2048
    "--enable-chunked-prefill": ("effective", True),
    "--enable-auto-tool-choice": ("default", False),
    "--tool-call-parser": ("default", None),
    "--reasoning-parser": ("falsy", None),  # "" in vLLM's StructuredOutputsConfig
    "--runner": ("default", "auto"),
    "--convert": ("default", "auto"),
    "--enforce-eager": ("default", False),
    "--tensor-parallel-size": ("default", 1),
    "-tp": ("default", 1),
    "--pipeline-parallel-size": ("default", 1),
    "-pp": ("default", 1),
    "--data-parallel-size": ("default", 1),
    "-dp": ("default", 1),
    "--enable-expert-parallel": ("default", False),
    "--cpu-offload-gb": ("default", 0),
    "--limit-mm-per-prompt": ("default", ANY),  # model-specific
    "--generation-config": ("default", "auto"),
    "--override-generation-config": ("default", {}),
    "--tokenizer-mode": ("default", "auto"),
    "--chat-template": ("default", None),
    "--host": ("default", None),
    "--port": ("default", 8000),
}
# §1.1 / §1.4 name these as version-dependent.
BY_VERSION = {
    ("--gpu-memory-utilization", OLD): 0.9,  # "0.9 up to at least v0.16.0"
    ("--gpu-memory-utilization", NEW): 0.92,  # "0.92 in current main and the stable docs"
    ("--swap-space", OLD): 4,  # V0's swap, "accepted but ignored" for a while
    ("--language-model-only", NEW): False,  # the recipes' text_only feature, newer releases
}
GONE = {("--swap-space", NEW), ("--task", OLD), ("--task", NEW), ("--language-model-only", OLD)}


def effective(spec: versions.FlagSpec) -> object:
    return spec.field_default if spec.default is None else spec.default


@pytest.mark.parametrize("version", [OLD, NEW])
@pytest.mark.parametrize("option", sorted(CORE_FLAGS))
def test_the_core_flags_of_the_reference_are_in_every_generated_version(version, option):
    spec = versions.flag_list(version).find(option)
    assert spec is not None, f"{option} is missing from vLLM {version}"
    how, expected = CORE_FLAGS[option]
    if expected is ANY:
        return
    if how == "falsy":
        assert not spec.default
    else:
        assert (effective(spec) if how == "effective" else spec.default) == expected


@pytest.mark.parametrize("option,version", sorted(BY_VERSION))
def test_defaults_that_changed_between_versions_are_read_per_version(option, version):
    assert versions.flag_list(version).find(option).default == BY_VERSION[(option, version)]


@pytest.mark.parametrize("option,version", sorted(GONE))
def test_flags_a_version_does_not_have_are_not_in_its_list(option, version):
    assert versions.flag_list(version).find(option) is None


def test_switches_have_their_no_form_and_choices_come_from_the_source():
    flags = versions.flag_list(NEW)
    assert flags.find("--no-enable-prefix-caching").name == "enable_prefix_caching"
    assert flags.find("--max_model_len").name == "max_model_len"  # vLLM takes underscores
    assert set(flags.find("--runner").choices) >= {"auto", "generate", "pooling"}
    assert {"auto", "fp8", "fp8_e5m2"} <= set(flags.find("--kv-cache-dtype").choices)
    assert {"hermes", "llama3_json", "mistral", "openai"} <= set(flags.tool_call_parsers)
    assert {"qwen3", "deepseek_r1"} <= set(flags.reasoning_parsers)
    assert "awq" in flags.quantization_methods


def test_each_generated_file_names_its_wheel_and_generator():
    for version in versions.known_versions():
        data = json.loads((versions.FLAGS_DIR / f"vllm-{version}.json").read_text())
        assert data["version"] == version and data["wheel"].startswith(f"vllm-{version}-")
        assert len(data["wheel_sha256"]) == 64
        assert data["generated_by"].startswith("scripts/vllm_flags.py")
        assert len(data["flags"]) > 150
    assert len(versions.known_versions()) >= 2


@pytest.mark.parametrize(
    "asked,used",
    [("", NEW), ("latest", NEW), ("0.32.0", NEW), ("v0.20.1", OLD), ("0.40", NEW), ("0.9", OLD)],
)
def test_a_cluster_uses_its_own_version_or_the_newest_not_newer(asked, used):
    assert versions.version_for(asked) == used


def test_searching_the_flags_matches_names_groups_and_help():
    found = versions.flag_list(NEW).search("prefix caching")
    assert "enable_prefix_caching" in [f.name for f in found]
    assert all(not f.is_positional for f in versions.flag_list(NEW).search(""))


EDITOR_VALUES = {
    "max_model_len": 8192,
    "gpu_memory_utilization": 0.5,
    "kv_cache_dtype": "fp8",
    "max_num_seqs": 64,
    "max_num_batched_tokens": 4096,
    "enforce_eager": True,
    "enable_prefix_caching": False,
    "enable_chunked_prefill": False,
    "enable_auto_tool_choice": True,
    "tool_call_parser": "hermes",
    "reasoning_parser": "qwen3",
    "runner": "pooling",
    "other_flags": "--max-lora-rank 16 --seed=7",
}


def test_every_editor_setting_validates_and_becomes_its_flags():
    assert set(EDITOR_VALUES) == set(CATALOG)
    checked = validate_settings(EDITOR_VALUES, NEW)
    assert flag_arguments(checked) == [
        "--enable-auto-tool-choice",
        "--no-enable-chunked-prefill",
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--gpu-memory-utilization",
        "0.5",
        "--kv-cache-dtype",
        "fp8",
        "--max-model-len",
        "8192",
        "--max-num-batched-tokens",
        "4096",
        "--max-num-seqs",
        "64",
        "--reasoning-parser",
        "qwen3",
        "--runner",
        "pooling",
        "--tool-call-parser",
        "hermes",
        "--max-lora-rank",
        "16",
        "--seed=7",
    ]


def test_the_memory_settings_placement_reads_keep_their_names_and_types():
    for name, kind in MEMORY_SETTINGS.items():
        assert CATALOG[name].kind is kind


@pytest.mark.parametrize(
    "given,field,message",
    [
        ({"tool_call_parser": "nope"}, "tool_call_parser", "must be one of"),
        ({"reasoning_parser": 3}, "reasoning_parser", "must be one of"),
        ({"runner": "draft"}, "runner", "must be one of auto, generate, pooling"),
        ({"enable_prefix_caching": "no"}, "enable_prefix_caching", "must be true or false"),
        ({"other_flags": ["--seed", "1"]}, "other_flags", "must be text"),
        ({"other_flags": "--port 1"}, "other_flags", "‘--port’ cannot be set here"),
    ],
)
def test_bad_editor_settings_are_refused_naming_the_setting(given, field, message):
    with pytest.raises(EngineSettingsError) as raised:
        validate_settings(given, NEW)
    assert raised.value.field == field and message in raised.value.message


def test_a_parser_is_checked_against_the_clusters_version():
    newer_only = sorted(
        set(versions.flag_list(NEW).tool_call_parsers)
        - set(versions.flag_list(OLD).tool_call_parsers)
    )[0]
    assert validate_settings({"tool_call_parser": newer_only}, NEW)
    with pytest.raises(EngineSettingsError):
        validate_settings({"tool_call_parser": newer_only}, OLD)


# --- the generator, on a wheel small enough to write here ----------------------------------

CONFIG = '''
from typing import Literal
from dataclasses import field
CacheDType = Literal["auto", "fp8"]
DEFAULT_SEQS = 128

@config
class CacheConfig:
    """Cache."""
    gpu_memory_utilization: float = 0.92
    """The fraction of GPU memory."""
    cache_dtype: CacheDType = "auto"
    """Data type for kv cache storage."""
    enable_prefix_caching: bool = True
    """Whether to enable prefix caching."""
    max_num_seqs: int = field(default=DEFAULT_SEQS)
    """Maximum number of sequences."""
'''
ARG_UTILS = """
class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        cache_kwargs = get_kwargs(CacheConfig)
        cache_group = parser.add_argument_group(title="CacheConfig")
        cache_group.add_argument("--gpu-memory-utilization", **cache_kwargs["gpu_memory_utilization"])
        cache_group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
        cache_group.add_argument(
            "--enable-prefix-caching", **{**cache_kwargs["enable_prefix_caching"], "default": None}
        )
        cache_group.add_argument("--max-num-seqs", "-n", **cache_kwargs["max_num_seqs"])
        return parser

class AsyncEngineArgs(EngineArgs):
    @staticmethod
    def add_cli_args(parser):
        parser = EngineArgs.add_cli_args(parser)
        parser.add_argument("--enable-log-requests", action="store_true", default=False, help="Log.")
        return parser
"""
CLI_ARGS = '''
from vllm.config.cache import CacheConfig

@config
class FrontendArgs:
    """Frontend."""
    port: int = 8000
    """Port number."""
    tool_call_parser: str | None = None
    """Tool call parser."""

    @staticmethod
    def add_cli_args(parser):
        frontend_kwargs = get_kwargs(FrontendArgs)
        frontend_group = parser.add_argument_group(title="Frontend")
        for key, value in frontend_kwargs.items():
            frontend_group.add_argument(f"--{key.replace('_', '-')}", **value)
        return parser

def make_arg_parser(parser):
    parser.add_argument("model_tag", type=str, nargs="?", help="The model tag to serve")
    parser.add_argument("--config", help="Read CLI options from a config file.")
    parser = FrontendArgs.add_cli_args(parser)
    parser = AsyncEngineArgs.add_cli_args(parser)
    return parser
'''
TOOLS = '_TOOL_PARSERS_TO_REGISTER = {"hermes": ("hermes_tool_parser", "Hermes")}\n'


def tiny_wheel(folder: Path) -> Path:
    wheel = folder / "vllm-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/config/cache.py", CONFIG)
        archive.writestr(
            "vllm/engine/arg_utils.py", "from vllm.config.cache import *\n" + ARG_UTILS
        )
        archive.writestr("vllm/entrypoints/openai/cli_args.py", CLI_ARGS)
        archive.writestr("vllm/tool_parsers/__init__.py", TOOLS)
        archive.writestr("vllm/reasoning/__init__.py", "_REASONING_PARSERS_TO_REGISTER = {}\n")
    return wheel


def test_the_generator_reads_flags_types_defaults_and_help_from_a_wheel(tmp_path):
    data = vllm_flags.flag_list("9.9.9", tiny_wheel(tmp_path))
    flags = {f["name"]: f for f in data["flags"]}
    assert flags["gpu_memory_utilization"]["default"] == 0.92
    assert flags["gpu_memory_utilization"]["help"] == "The fraction of GPU memory."
    assert flags["kv_cache_dtype"]["flags"] == ["--kv-cache-dtype"]
    assert flags["kv_cache_dtype"]["choices"] == ["auto", "fp8"]
    assert flags["enable_prefix_caching"]["flags"] == [
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
    ]
    assert flags["enable_prefix_caching"]["default"] is None
    assert flags["enable_prefix_caching"]["field_default"] is True
    assert flags["max_num_seqs"]["flags"] == ["--max-num-seqs", "-n"]
    assert flags["max_num_seqs"]["default"] == 128
    assert flags["tool_call_parser"]["nullable"] is True
    assert flags["port"]["group"] == "Frontend" and flags["port"]["type"] == "int"
    assert flags["enable_log_requests"]["type"] == "bool"
    assert flags["model_tag"]["flags"] == ["model_tag"]
    assert "config" in flags
    assert data["tool_call_parsers"] == ["hermes"]


def test_the_generator_imports_nothing_from_the_wheel(tmp_path):
    wheel = tiny_wheel(tmp_path)
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("vllm/__init__.py", "raise SystemExit('imported!')\n")
    assert vllm_flags.flag_list("9.9.9", wheel)["flags"]
