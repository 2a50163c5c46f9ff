"""Which vLLM flags an operator may type, reviewed one by one: the one home of that policy.

Other flags is an allow-list (DESIGN §8b: engines are untrusted, and so is what an operator
types for them). A flag passes only when it is reviewed here, for what it lets the engine do:
load or run code, read or write files, take memory outside the copy's share, open a listener
or a connection, let callers send what the engine runs, or put prompts and keys in logs.
A JSON flag passes only with reviewed keys (dotted sub-keys included, `-cc.mode=3`) whose
values are of the reviewed kind; a text flag only with reviewed values. A flag of a newer
vLLM that nobody has reviewed yet is refused until it is added here (the editor's list of
flags says so), so upgrading the engine never widens what an operator can do.

Refused flags say why in an operator's words and what to use instead; flags Berth renders
itself (the budget's cache size, the port, the served name) are Berth's, not an operator's,
and are not subject to this list.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# The flag lists whose every flag was read for this review.
REVIEWED_VERSIONS = ("0.16.0", "0.32.0")

# --- refused, with why and what to use instead ------------------------------------------------

# Flags Berth sets itself, by vLLM's dest name.
MANAGED = {
    "model": "Berth passes the deployment's own model",
    "model_tag": "Berth passes the deployment's own model",
    "host": "Berth sets the address each copy listens on",
    "port": "Berth sets the port each copy listens on",
    "uds": "Berth sets the address each copy listens on",
    "served_model_name": "Berth names the model after the deployment",
    "api_key": "Berth gives each copy its own key",
    "root_path": "Berth's gateway routes the requests",
    "download_dir": "Berth keeps the model's files",
    "hf_token": "Berth passes the Hugging Face token itself",
    "revision": "set the revision when hosting",
    "tensor_parallel_size": "it follows the number of accelerators per copy (Scale)",
    "pipeline_parallel_size": "it follows the number of accelerators per copy (Scale)",
    "gpu_memory_utilization": "use Share of the accelerator's memory",
    "headless": "Berth runs each copy as one server",
    "api_server_count": "Berth runs each copy as one server",
}
# Flags the editor has a control for: one place for each setting, so the estimate sees it.
EDITOR_CONTROLS = {
    "max_model_len": "Longest conversation",
    "kv_cache_dtype": "8-bit context cache",
    "max_num_seqs": "Requests at once",
    "max_num_batched_tokens": "Tokens per step",
    "enforce_eager": "Skip graph capture",
    "enable_prefix_caching": "Reuse shared prompt starts",
    "enable_chunked_prefill": "Split long prompts",
    "enable_auto_tool_choice": "Tool calling",
    "tool_call_parser": "Tool calling → Format",
    "reasoning_parser": "Show its thinking separately",
    "runner": "Serve embeddings",
}
USE_SHARE = "; give the copy a larger Share or more accelerators instead"
OUTSIDE_THE_BUDGET = (
    "it takes memory outside the copy's share, which other teams' copies are using" + USE_SHARE
)
LISTENS = (
    "it opens a listener or a connection beyond the copy's own port (Berth places and "
    "connects every copy itself, and only the gateway may reach it)"
)
CALLERS_SEND_CODE = "it lets callers send {what} that the engine runs; nobody's request may"
INTO_THE_LOG = (
    "it writes {what} into the engine's log, which every viewer of the deployment reads; "
    "use the gateway's request figures instead"
)
REFUSED = {
    # Code and files (reference/vllm.md §1.6).
    "config": "it reads a whole file of flags; type the flags here instead",
    "middleware": "it loads Python code into the server",
    "logits_processors": "it loads Python code",
    "logits_processor_pattern": "it lets requests load Python code",
    "chat_template": "it reads a file from the machine; the model's own template is used",
    "allowed_local_media_path": "it lets requests read files on the machine",
    "allowed_media_domains": "it lets the engine fetch media from the internet",
    "trust_remote_code": "it runs Python from the model's repository: a platform admin "
    "trusts a model's code in the model's page, and every copy of it then runs with it",
    "hf_overrides": "it rewrites the model's configuration",
    "model_loader_extra_config": "it configures loaders that read other files",
    "kv_transfer_config": "it can name modules to load, and connects to other engines",
    "ec_transfer_config": "it can name modules to load, and connects to other engines",
    "speculative_config": "it can load a second model; host the draft as its own deployment",
    "spec_method": "it drives speculative decoding, which can load a second model",
    "spec_model": "it loads a second model; host it as its own deployment",
    "spec_tokens": "it drives speculative decoding, which can load a second model",
    "tokenizer": "it loads a tokenizer from another repository or path",
    "tokenizer_revision": "it downloads another revision of the tokenizer",
    "hf_config_path": "it reads a configuration from a path",
    "lora_modules": "it loads adapters from paths",
    "default_mm_loras": "it loads adapters from paths",
    "log_config_file": "it reads a file from the machine",
    "logging_config": "its logging configuration can call any Python function",
    "profiler_config": "it writes profiles to folders anywhere on the machine",
    "additional_config": "it passes unchecked settings to the platform's plugins",
    "code_revision": "it picks which Python code of the repository runs",
    "tool_server": "it connects the server to tool servers",
    "model_class_overrides": "it loads other model classes",
    "weight_transfer_config": "it receives weights from other processes",
    "mm_encoder_fp8_scale_path": "it reads a file from the machine",
    "mm_encoder_fp8_scale_save_path": "it writes a file on the machine",
    "io_processor_plugin": "it loads a plugin",
    "attention_config": "it can name a backend module to load; use --attention-backend",
    "kernel_config": "it can name kernel modules to load",
    "ir_op_priority": "it can name operator modules to load",
    # Memory outside the share.
    "kv_cache_memory_bytes": OUTSIDE_THE_BUDGET,
    "num_gpu_blocks_override": OUTSIDE_THE_BUDGET,
    "cpu_offload_gb": OUTSIDE_THE_BUDGET,
    "cpu_offload_params": OUTSIDE_THE_BUDGET,
    "swap_space": OUTSIDE_THE_BUDGET,
    "kv_offloading_size": OUTSIDE_THE_BUDGET,
    "kv_offloading_backend": OUTSIDE_THE_BUDGET,
    "offload_backend": OUTSIDE_THE_BUDGET,
    "offload_group_size": OUTSIDE_THE_BUDGET,
    "offload_num_in_group": OUTSIDE_THE_BUDGET,
    "offload_params": OUTSIDE_THE_BUDGET,
    "offload_prefetch_step": OUTSIDE_THE_BUDGET,
    "enable_sleep_mode": OUTSIDE_THE_BUDGET,
    "mm_ipc_gpu_memory_gb": OUTSIDE_THE_BUDGET,
    # Listeners and outbound channels.
    "kv_events_config": LISTENS,
    "otlp_traces_endpoint": LISTENS,
    "collect_detailed_traces": LISTENS,
    "grpc": LISTENS,
    "grpc_port": LISTENS,
    "enable_scale_out": LISTENS,
    "enable_elastic_ep": LISTENS,
    "elastic_ep_max_dp_size": LISTENS,
    "distributed_executor_backend": LISTENS,
    "nnodes": LISTENS,
    "node_rank": LISTENS,
    "master_addr": LISTENS,
    "master_port": LISTENS,
    "data_parallel_supervisor_port": LISTENS,
    "enable_fault_tolerance": LISTENS,
    "fault_tolerance_config": LISTENS,
    # Callers' code.
    "trust_request_chat_template": CALLERS_SEND_CODE.format(what="chat templates"),
    "enable_mm_embeds": CALLERS_SEND_CODE.format(what="tensors"),
    "trust_request_mm_kwargs": CALLERS_SEND_CODE.format(what="processor arguments"),
    "enable_prompt_embeds": CALLERS_SEND_CODE.format(what="tensors"),
    # Logs every viewer reads.
    "enable_log_requests": INTO_THE_LOG.format(what="teammates' prompts"),
    "enable_log_outputs": INTO_THE_LOG.format(what="teammates' answers"),
    "enable_log_deltas": INTO_THE_LOG.format(what="teammates' answers"),
    "log_level": INTO_THE_LOG.format(what="requests (at debug)"),
}
# Families of dest names that load code, read files or listen, whatever the version.
REFUSED_PATTERNS = (
    (re.compile(r"plugin|(_cls|_path|_paths|_file|_files|_dir|_module|_modules)$"),
     "it loads code or reads files on the machine"),
    (re.compile(r"^ssl_"), "the gateway speaks TLS; the engine is reached only by Berth"),
    (re.compile(r"^(data_parallel|dp_|dcp_|decode_context|prefill_context)"),
     "it splits a copy over several engines; use more copies (Scale) instead"),
)  # fmt: skip
UNREVIEWED = (
    "it has not been reviewed for Berth yet (a platform admin adds it to "
    "deployments/engine/reviewed.py once it is); the editor's settings cover the common needs"
)

# --- reviewed and allowed ---------------------------------------------------------------------

WORD = r"[A-Za-z0-9_.:+-]{1,100}"  # a name or number: no slash, so never a path
ORIGIN = r"\*|https?://[A-Za-z0-9.-]{1,100}(:\d{1,5})?"  # what a browser sends as Origin


@dataclass(frozen=True)
class Review:
    """How an allowed flag is taken: a text flag's values, a JSON flag's keys."""

    values: tuple[str, ...] = ()  # the only values a text flag takes (empty: its type says)
    pattern: str = ""  # or the pattern its value must match
    # A JSON flag's reviewed keys (dotted for nested ones, "*" for any one key) and the kind
    # of value each takes: bool, int, number, word, words (a list), ints, scalar, origins;
    # "[]" for a flag whose value is a list.
    keys: dict[str, str] = field(default_factory=dict)


PLAIN = Review()
# Switches, numbers and choices that only tune the engine inside its own memory and port.
PLAIN_FLAGS = (
    "seed", "dtype", "quantization", "max_logprobs", "logprobs_mode", "tokenizer_mode",
    "config_format", "model_impl", "convert", "disable_cascade_attn", "disable_sliding_window",
    "disable_log_stats", "aggregate_engine_logging", "block_size", "prefix_caching_hash_algo",
    "scheduling_policy", "async_scheduling", "long_prefill_token_threshold",
    "max_num_partial_prefills", "max_long_partial_prefills", "stream_interval",
    "disable_chunked_mm_input", "disable_hybrid_kv_cache_manager", "max_num_queued_reqs",
    "max_num_queued_tokens", "max_parallel_loading_workers", "disable_custom_all_reduce",
    "enable_expert_parallel", "enable_lora", "max_lora_rank", "max_loras", "max_cpu_loras",
    "fully_sharded_loras", "lora_dtype", "max_log_len", "response_role",
    "return_tokens_as_token_ids", "chat_template_content_format", "enable_prompt_tokens_details",
    "enable_force_include_usage", "enable_server_load_tracking", "disable_fastapi_docs",
    "disable_uvicorn_access_log", "enable_request_id_headers",
    "exclude_tools_when_tool_choice_none", "tool_strict_level", "h11_max_header_count",
    "h11_max_incomplete_event_size", "allow_credentials", "cudagraph_capture_sizes",
    "max_cudagraph_capture_size", "performance_mode", "kv_cache_metrics",
    "kv_cache_metrics_sample", "enable_mfu_metrics", "cudagraph_metrics",
    "safetensors_load_strategy", "use_tqdm_on_load", "renderer_num_workers", "shutdown_timeout",
    "log_error_stack", "enable_tokenizer_info_endpoint", "sse_keep_alive_interval",
    "enable_per_request_metrics", "mm_processor_cache_gb", "mm_processor_cache_type",
    "skip_mm_profiling", "language_model_only", "interleave_mm_strings", "mm_encoder_tp_mode",
    "disable_frontend_multiprocessing", "disable_log_requests", "enable_offline_docs",
    "tokens_only", "max_num_scheduled_tokens", "max_num_active_seqs", "calculate_kv_scales",
)  # fmt: skip
GENERATION = {
    key: "number"
    for key in (
        "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
        "frequency_penalty", "max_new_tokens",
    )
}  # fmt: skip
ALLOWED: dict[str, Review] = {
    **{name: PLAIN for name in PLAIN_FLAGS},
    "generation_config": Review(values=("auto", "vllm")),  # a folder would read files
    "load_format": Review(values=("auto", "safetensors", "pt")),
    "uvicorn_log_level": Review(values=("critical", "error", "warning", "info")),  # not trace
    "optimization_level": Review(values=("0", "1", "2", "3")),
    "attention_backend": Review(pattern=r"[A-Z][A-Z0-9_]{1,60}"),  # a registered backend's name
    "show_hidden_metrics_for_version": Review(pattern=r"\d+\.\d+(\.\d+)?"),
    "limit_mm_per_prompt": Review(keys={"image": "int", "video": "int", "audio": "int"}),
    "override_generation_config": Review(keys=GENERATION),
    "default_chat_template_kwargs": Review(keys={"*": "scalar"}),
    "allowed_origins": Review(keys={"[]": "origins"}),
    "allowed_methods": Review(keys={"[]": "words"}),
    "allowed_headers": Review(keys={"[]": "words"}),
    "compilation_config": Review(
        keys={
            "mode": "int",
            "level": "int",
            "cudagraph_mode": "word",
            "cudagraph_capture_sizes": "ints",
            "max_cudagraph_capture_size": "int",
            "use_inductor_graph_partition": "bool",
            "pass_config.*": "bool",  # the built-in fusion passes' switches
        }
    ),
    "structured_outputs_config": Review(
        keys={
            "backend": "word",
            "disable_any_whitespace": "bool",
            "disable_additional_properties": "bool",
        }
    ),
}


def refusal(name: str) -> str:
    """Why an operator may not type the flag of this dest name ("" when they may)."""
    if name in MANAGED:
        return f"Berth manages it ({MANAGED[name]})"
    if name in EDITOR_CONTROLS:
        return f"use the editor's own setting, {EDITOR_CONTROLS[name]}"
    if name in REFUSED:
        return REFUSED[name]
    for pattern, why in REFUSED_PATTERNS:
        if pattern.search(name):
            return why
    return "" if name in ALLOWED else UNREVIEWED


def turning_off_is_fine(name: str) -> bool:
    """`--no-enable-log-requests` only turns a refused switch off, which is always safe; a
    flag nobody has reviewed stays refused in every spelling."""
    return name in REFUSED and name not in MANAGED


def review_of(name: str) -> Review:
    """How an allowed flag is taken (PLAIN for a flag with nothing more to review)."""
    return ALLOWED.get(name, PLAIN)


def value_problem(name: str, value: str, is_text: bool) -> str:
    """Whether a value is one reviewed for the flag; a text flag without reviewed values takes
    a name, never a path."""
    review = review_of(name)
    if review.values and value not in review.values:
        return f"must be one of {', '.join(review.values)}"
    if review.pattern and not re.fullmatch(review.pattern, value):
        return "is not a value reviewed for this flag"
    if is_text and not (review.values or review.pattern) and not re.fullmatch(WORD, value):
        return "must be a name: no slash, no path"
    return ""


# --- JSON values ------------------------------------------------------------------------------


def key_kind(name: str, key: str) -> str:
    """The kind of value a JSON flag's key takes ("" when the key is not reviewed)."""
    keys = review_of(name).keys
    if key in keys:
        return keys[key]
    parent = key.rpartition(".")[0]
    if parent and f"{parent}.*" in keys:
        return keys[f"{parent}.*"]
    return keys.get("*", "") if "." not in key else ""


def flat_keys(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """A JSON object as (dotted key, value) pairs, as vLLM merges `--a.b.c` into it."""
    if isinstance(value, dict) and value:
        pairs: list[tuple[str, Any]] = []
        for key, inner in value.items():
            pairs += flat_keys(inner, f"{prefix}.{key}" if prefix else str(key))
        return pairs
    return [(prefix, value)]


def kind_problem(kind: str, value: Any) -> str:
    """Whether a parsed JSON value is of the reviewed kind."""
    if KIND_CHECKS[kind](value):
        return ""
    return f"must be {KIND_WORDS[kind]}"


def is_word(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(WORD, value) is not None


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


KIND_CHECKS = {
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": is_number,
    "word": is_word,
    "words": lambda v: isinstance(v, list) and all(is_word(i) for i in v),
    "ints": lambda v: isinstance(v, list) and all(type(i) is int for i in v),
    "scalar": lambda v: isinstance(v, bool) or is_number(v) or is_word(v),
    "origins": lambda v: (
        isinstance(v, list) and all(isinstance(i, str) and re.fullmatch(ORIGIN, i) for i in v)
    ),
}
KIND_WORDS = {
    "bool": "true or false",
    "int": "a whole number",
    "number": "a number",
    "word": "a name (letters, digits, . _ : + -)",
    "words": "a list of names",
    "ints": "a list of whole numbers",
    "scalar": "true, false, a number or a name",
    "origins": "a list of origins (https://host[:port], or *)",
}


def json_problems(name: str, value: Any) -> list[str]:
    """What in a JSON flag's parsed value is not reviewed, one message per key."""
    keys = review_of(name).keys
    if "[]" in keys:
        return [] if KIND_CHECKS[keys["[]"]](value) else [f"must be {KIND_WORDS[keys['[]']]}"]
    if not isinstance(value, dict):
        return ["must be a JSON object of the reviewed keys"]
    found = []
    for key, inner in flat_keys(value):
        found += key_problems(name, key, inner)
    return found


def key_problems(name: str, key: str, value: Any) -> list[str]:
    kind = key_kind(name, key)
    if not kind:
        reviewed = ", ".join(sorted(review_of(name).keys)) or "none"
        return [f"sets ‘{key}’, which has not been reviewed for Berth (reviewed: {reviewed})"]
    problem = kind_problem(kind, value)
    return [f"sets ‘{key}’ to {value!r}, which {problem}"] if problem else []


def dotted_value(text: str) -> Any:
    """A `--flag.key value`'s value as vLLM reads it: JSON where it parses, else the text;
    Python's True and False as the switches they are."""
    if text in ("True", "False"):
        return text == "True"
    try:
        return json.loads(text)
    except ValueError:
        return text


def summary(name: str) -> str:
    """What the editor's list of flags says of a flag: may it be typed, and how."""
    why = refusal(name)
    if why:
        return f"Not here: {why}."
    keys = ALLOWED[name].keys
    if keys and "[]" not in keys:
        return "Only these keys: " + ", ".join(sorted(keys)) + "."
    values = ALLOWED[name].values
    return f"Only {', '.join(values)}." if values else "Can be set under Other flags."
