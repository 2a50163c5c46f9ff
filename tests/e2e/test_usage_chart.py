"""The usage page draws its charts with the vendored Chart.js from the rows it shows (issue 38)."""

from __future__ import annotations

import pytest

from console.models import Role
from tests import factories
from tests.e2e.test_navigation import log_in
from tests.integration.test_usage_page import served

pytestmark = pytest.mark.e2e

# Each dataset's values as Chart.js holds them, and how many points it drew of each.
DRAWN = """(id) => {
  const chart = Chart.getChart(id);
  return chart.data.datasets.map((set, index) => [set.label, set.data, chart.getDatasetMeta(index).data.length]);
}"""


def test_the_tokens_and_requests_charts_draw_a_point_per_day(page, console_url):
    bob = factories.make_user("bob")
    red = factories.make_team("red")
    factories.add_member(bob, red, Role.VIEWER)
    qwen = factories.make_deployment("red-qwen", red)
    served(qwen, bob, "2026-03-01T10:05", 10, 20)
    served(qwen, bob, "2026-03-02T09:00", 100, 50)
    refused: list[str] = []  # what the Content-Security-Policy blocked, were it anything

    def note_refusal(message) -> None:
        if "Content Security Policy" in message.text:
            refused.append(message.text)

    page.on("console", note_refusal)
    log_in(page, console_url, "bob")
    page.goto(f"{console_url}/usage/?group_by=deployment&from=2026-03-01&to=2026-03-02")
    page.wait_for_function("() => window.Chart && Chart.getChart('requests-chart')")
    assert page.evaluate(DRAWN, "tokens-chart") == [["red-qwen", [30, 150], 2]]
    assert page.evaluate(DRAWN, "requests-chart") == [["red-qwen", [1, 1], 2]]
    assert refused == []
