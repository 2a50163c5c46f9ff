"""llama.cpp's llama-server and the engine simulator's llama-server mode, side by side: the same
argv (as Berth renders it for a copy on a CPU) through the standalone and simulator backends,
read through Berth's own code. Where they differ, the simulator is wrong."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from catalog.tiny_model import GGUF_FILE
from clusters.registry import engine_programs
from deployments import engine_figures
from deployments.choices import ErrorCode
from tests.conformance.harness import KEY, REAL, SERVED, SIMULATED, Started, start
from tests.real_engines import port_is_free

pytestmark = pytest.mark.timeout(300)
KINDS = [REAL, SIMULATED]
HELLO = [{"role": "user", "content": "Hello"}]


def llama_server(gguf: Path, *flags: str) -> list[str]:
    """As deployments/engine/argv.py renders it for a copy on a CPU (before the port)."""
    return ["llama-server", "--model", str(gguf), "--alias", SERVED, "--threads", "1", *flags]


@pytest.fixture(scope="module")
def engines(tiny, state_dir) -> Iterator[dict[str, Started]]:
    engine_programs().binary("llama-server")  # missing: fails here, naming `make engines`
    argv = llama_server(tiny / GGUF_FILE, "--metrics", "--ctx-size", "512")
    started = {kind: start(kind, state_dir, tiny, argv, {}) for kind in KINDS}
    for engine in started.values():
        engine.wait({"ready"}, 60)
    yield started
    for engine in started.values():
        engine.stop()


@pytest.fixture(params=KINDS)
def serving(request, engines) -> Started:
    return engines[request.param]


def chat(engine: Started, model: str, key: str = KEY) -> httpx.Response:
    return httpx.post(
        f"http://127.0.0.1:{engine.port}/v1/chat/completions",
        json={"model": model, "messages": HELLO, "max_tokens": 3},
        headers={"Authorization": f"Bearer {key}"} if key else {},
        timeout=30,
    )


def test_health_answers_with_its_status_once_ready(serving):
    assert serving.observe().status == "ready"
    assert serving.get("/health") == (200, b'{"status":"ok"}')


def test_the_requests_model_is_ignored(serving):
    """Unlike vLLM, a wrong name still answers: the gateway must route by name itself."""
    assert chat(serving, "no-such-model").status_code == 200


def test_without_the_key_it_refuses_with_401(serving):
    assert chat(serving, SERVED, key="").status_code == 401
    assert chat(serving, SERVED, key="wrong").status_code == 401


def test_metrics_with_the_key_become_berths_engine_figures(serving):
    chat(serving, SERVED)
    totals: dict[str, float] = {}
    engine_figures.add_copy(totals, serving.backend.metrics(serving.handle))
    assert set(totals) == {
        "requests_running",
        "requests_waiting",
        "prompt_tokens_total",
        "generation_tokens_total",
    }
    assert totals["prompt_tokens_total"] > 0 and totals["generation_tokens_total"] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_flag_fails_for_good_with_its_own_words(kind, tiny, state_dir):
    engine = start(kind, state_dir, tiny, llama_server(tiny / GGUF_FILE, "--no-such-flag"), {})
    failure = engine.failed_for_good(1)
    assert failure.code == ErrorCode.RUNTIME_ERROR
    assert failure.line == "error: invalid argument: --no-such-flag"


@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_gguf_is_a_loading_failure_named_by_its_first_line(
    kind, tiny, state_dir, engine_tmp
):
    gone = engine_tmp / "gone.gguf"
    engine = start(kind, state_dir, tiny, llama_server(gone), {})
    failure = engine.failed_for_good(1)
    assert failure.code == ErrorCode.MODEL_LOADING_FAILURE
    assert failure.line == (
        f"gguf_init_from_file: failed to open GGUF file '{gone}' (No such file or directory)"
    )


def test_a_truncated_gguf_is_a_loading_failure(tiny, state_dir, engine_tmp):
    """The real engine only: the simulator does not read the file's tensors."""
    cut = engine_tmp / "cut.gguf"
    shutil.copy(tiny / GGUF_FILE, cut)
    with cut.open("r+b") as file:
        file.truncate(cut.stat().st_size // 2)
    engine = start(REAL, state_dir, tiny, llama_server(cut), {})
    seen, failure = engine.failure()
    assert (seen.status, seen.exit_code) == ("exited", 1)
    assert failure is not None and failure.code == ErrorCode.MODEL_LOADING_FAILURE
    assert "is not within the file bounds" in failure.line


def test_sigterm_ends_it_with_exit_0_and_frees_its_port(serving):
    serving.stop()
    seen = serving.wait({"exited", "gone"}, 30)
    assert (seen.status, seen.exit_code) == ("exited", 0)
    assert port_is_free(serving.port)
