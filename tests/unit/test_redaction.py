"""Secrets out of engine lines: the copy's own key wherever it stands, and key-shaped values in
the shapes engines print them."""

from __future__ import annotations

import pytest

from clusters.backends.argv import KEY_SHOWN, without_key
from deployments.launching import new_engine_key
from deployments.redaction import HIDDEN, redact

KEY = "engine-" + "A" * 32
# vLLM 0.32's start-up line when a key is on its command line (reference/real-engines.md §1).
NON_DEFAULT = (
    "(APIServer pid=7) INFO 12-01 10:15:02 [api_utils.py:286] non-default args: "
    f"{{'model_tag': '/m', 'host': '127.0.0.1', 'port': 8123, 'api_key': ['{KEY}'], "
    "'max_model_len': 512}"
)


@pytest.mark.parametrize(
    ("line", "hidden"),
    [
        (NON_DEFAULT, "'api_key': ['[hidden]']"),
        ('{"api_key": "sk-live-123456"}', '"api_key": "[hidden]"'),
        ("api_key=sk-live-123456 and more", "api_key=[hidden] and more"),
        ("vllm serve m --api-key sk-live-123456 --port 1", "--api-key [hidden] --port 1"),
        ("--api-key=sk-live-123456", "--api-key=[hidden]"),
        ("env VLLM_API_KEY=sk-live-123456", "VLLM_API_KEY=[hidden]"),
        ("LLAMA_API_KEY: 'sk-live-123456'", "LLAMA_API_KEY: '[hidden]'"),
        ("Authorization: Bearer sk-live-123456", "Bearer [hidden]"),
        ("token hf_abcdefghijklmnopqrstuvwxyz used", "token [hidden] used"),
        (f"a stray {KEY} in a traceback", f"a stray {HIDDEN} in a traceback"),
    ],
)
def test_key_shaped_values_are_hidden(line, hidden):
    assert hidden in redact(line)
    assert "sk-live-123456" not in redact(line) and KEY not in redact(line)


def test_the_copys_own_key_is_hidden_whatever_its_shape():
    assert redact("the key is s3cr3t-of-any-shape!", ["s3cr3t-of-any-shape!"]) == (
        f"the key is {HIDDEN}"
    )


def test_a_generated_engine_key_is_caught_by_its_shape_alone():
    key = new_engine_key()
    assert key not in redact(f"Invalid key {key}.")


def test_lines_without_secrets_are_kept_as_they_are():
    for line in (
        "INFO Starting vLLM server on http://127.0.0.1:8123",
        "'api_key': None, 'max_model_len': 512",
        "The model `x` does not exist.",
    ):
        assert redact(line) == line


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (
            ["vllm", "--api-key", KEY, "--port", "1"],
            ["vllm", "--api-key", KEY_SHOWN, "--port", "1"],
        ),
        (["vllm", f"--api-key={KEY}"], ["vllm", f"--api-key={KEY_SHOWN}"]),
        (["vllm", "--port", "1"], ["vllm", "--port", "1"]),
    ],
)
def test_a_command_line_is_shown_without_its_key_in_either_form(argv, shown):
    assert without_key(argv) == shown
