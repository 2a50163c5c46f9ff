"""The chat page in Chromium: a reply streams in, with its time to first token and speed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from clusters.simulator import build_env
from console.models import Role
from tests import factories
from tests.e2e.test_navigation import log_in
from tests.integration.test_gateway import Engine, serving, serving_engines

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    started = serving_engines(one=("Qwen/Qwen3-0.6B", ["red-qwen"], build_env(reply_tokens=12)))
    yield started["one"]
    started["one"].kill()


def test_a_reply_streams_in_with_its_time_to_first_token_and_speed(page, console_url, engine):
    red = factories.make_team("red")
    factories.add_member(factories.make_user("bob"), red, Role.VIEWER)
    serving(factories.make_deployment("red-qwen", red, chat_name="qwen"), engine.port)
    log_in(page, console_url, "bob")
    page.goto(f"{console_url}/chat/")
    assert page.locator("#chat-model option").all_inner_texts() == ["qwen"]

    for turn, message in enumerate(["Hello", "Tell me more"], start=1):
        page.fill("#chat-message", message)
        page.click("#chat-send")
        figures = page.locator(".turn-assistant .reply-figures").nth(turn - 1)
        figures.filter(has_text="First token after").wait_for()
        assert figures.inner_text().endswith("tokens/s")
        assert page.locator(".turn-assistant p").nth(turn - 1).inner_text().strip()
    assert page.locator(".turn-user p").all_inner_texts() == ["Hello", "Tell me more"]
    assert page.url == f"{console_url}/chat/"  # JavaScript sent it: the page stayed
