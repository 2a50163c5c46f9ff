"""The Other flags box: text split like a POSIX shell splits it, then every word checked against
the reviewed flags of the cluster's vLLM version. The hostile corpus (tests/flag_corpus.py) is
also sent through the editor, the wizard and the API (tests/integration/test_editor_and_scale.py,
test_wizard.py)."""

from __future__ import annotations

import pytest

from deployments.engine import other_flags, presets, suggestions
from deployments.engine.argv import LaunchFacts, vllm_argv
from deployments.engine.settings import EngineSettingsError, validate_settings
from deployments.engine.versions import flag_list
from tests.flag_corpus import BENIGN, HOSTILE
from tests.unit.test_editor_warnings import context as catalog_context

NEW = flag_list("0.32.0")
OLD = flag_list("0.16.0")


@pytest.mark.parametrize("text,words", HOSTILE, ids=range(len(HOSTILE)))
def test_every_hostile_text_is_refused_with_a_message_naming_the_word(text, words):
    problems = other_flags.problems(text, NEW)
    assert problems, f"accepted: {text!r}"
    for word in words:
        assert any(word in problem for problem in problems), (word, problems)


@pytest.mark.parametrize("text,words", HOSTILE, ids=range(len(HOSTILE)))
def test_the_api_settings_refuse_the_same_texts(text, words):
    with pytest.raises(EngineSettingsError) as raised:
        validate_settings({"other_flags": text}, "0.32.0")
    assert raised.value.field == "other_flags"
    assert all(word in raised.value.message for word in words)


def test_the_corpus_has_at_least_120_hostile_inputs():
    assert len(HOSTILE) >= 120
    assert len({text for text, _ in HOSTILE}) == len(HOSTILE)


@pytest.mark.parametrize("text", BENIGN)
def test_ordinary_flags_are_taken(text):
    assert other_flags.problems(text, NEW) == []


def test_the_benign_corpus_has_at_least_forty_flags():
    assert len([text for text in BENIGN if text.strip()]) >= 40


def test_a_flag_of_one_version_only_is_checked_against_the_clusters_not_the_union():
    only_new = "--performance-mode interactivity"
    assert NEW.find("--performance-mode") and OLD.find("--performance-mode") is None
    assert other_flags.problems(only_new, NEW) == []
    assert "not a flag of vLLM 0.16.0" in other_flags.problems(only_new, OLD)[0]
    with pytest.raises(EngineSettingsError, match="not a flag of vLLM 0.16.0"):
        validate_settings({"other_flags": only_new}, "0.16.0")


def test_a_flag_nobody_has_reviewed_is_refused_in_every_version():
    assert "not been reviewed for Berth" in other_flags.problems("--numa-bind", NEW)[0]


def test_every_refused_word_is_reported_not_only_the_first():
    problems = other_flags.problems("--port 1 --config x.yaml Qwen/Qwen3-8B", NEW)
    assert len(problems) == 3


def test_taken_words_go_last_on_the_command_line_each_its_own_argument():
    settings = validate_settings(
        {"max_model_len": 4096, "other_flags": "--seed 7 --max-lora-rank 8"}, "0.32.0"
    )
    facts = LaunchFacts("Qwen/Qwen3-8B", "qwen", 8000, 0.4)
    argv = vllm_argv(settings, facts)
    assert argv[-6:] == ["--max-model-len", "4096", "--seed", "7", "--max-lora-rank", "8"]


CATALOG_MODELS = [
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-8B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "openai/gpt-oss-20b",
    "deepseek-ai/DeepSeek-V3",
    "BAAI/bge-m3",
]


@pytest.mark.parametrize("repo_id", CATALOG_MODELS)
def test_every_preset_and_every_recipe_suggestion_passes_the_checks(repo_id):
    where = catalog_context(repo_id)
    for key in presets.PRESETS:
        validate_settings(presets.apply(key, {}, where), "0.32.0")
    suggested = {s.setting: s.value for s in suggestions.suggest(where)}
    assert validate_settings(suggested, "0.32.0") == suggested
