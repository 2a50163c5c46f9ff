"""The engine's own word that it serves, which makes the watcher look at once."""

from __future__ import annotations

import pytest

from clusters.backends.logparse import last_telling_line, says_serving


@pytest.mark.parametrize(
    "line",
    [
        "(APIServer pid=41) INFO:     Application startup complete.",
        "INFO:     Application startup complete.",
        "main: server is listening on http://127.0.0.1:8011 - starting the main loop",
    ],
)
def test_the_start_up_lines_of_vllm_and_llama_cpp_say_serving(line):
    assert says_serving(line)


@pytest.mark.parametrize(
    "line",
    [
        "(APIServer pid=41) INFO:     Waiting for application startup.",
        "(APIServer pid=41) INFO 12-05 14:45:06 [api_server.py:1] Starting vLLM API server 0",
        "ERROR: Application startup failed. Exiting.",
        "llama_server: loading model",
    ],
)
def test_lines_before_serving_or_of_a_failed_start_do_not(line):
    assert not says_serving(line)


def test_the_line_quoted_is_the_root_cause_else_the_last_that_is_not_a_request():
    tail = [
        "INFO 12-05 14:45:06 [loader.py:1] Loading weights",
        'INFO:     127.0.0.1:58256 - "GET /health HTTP/1.1" 200 OK',
    ]
    assert last_telling_line(tail) == tail[0]
    crashed = [*tail, "torch.OutOfMemoryError: CUDA out of memory.", "Engine core failed"]
    assert last_telling_line(crashed) == "torch.OutOfMemoryError: CUDA out of memory."
    assert last_telling_line(tail[1:]) == ""
