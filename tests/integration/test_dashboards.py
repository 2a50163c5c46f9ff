"""The Grafana dashboards under deploy/grafana/ ask only for what Berth exports: every metric a
panel's query names is a family that the running console (daphne) or gateway (uvicorn) prints on
its /metrics, and every label it groups or matches by is on that family's samples."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import httpx
import pytest

from tests.integration.test_console_metrics import fleet
from tests.integration.test_gateway import session_of
from tests.processes import console_server, gateway_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

BOARDS = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
# PromQL's own words in the boards' queries: everything else that reads as a name is a metric.
PROMQL_WORDS = {"sum", "rate", "histogram_quantile", "by", "without"}
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="')


def exported(text: str) -> dict[str, set[str]]:
    """Each metric name a /metrics text declares or samples, with the labels seen on it (a
    histogram's family gives its _bucket, _sum and _count names)."""
    names: dict[str, set[str]] = defaultdict(set)
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            for name in (family, *(family + s for s in SUFFIXES.get(kind, ()))):
                names[name]
        elif (sample := SAMPLE.match(line)) is not None:
            names[sample.group(1)] |= set(LABEL.findall(sample.group(2) or ""))
    return names


def asked_for(expr: str) -> tuple[set[str], set[str]]:
    """The metric names a query reads and the labels it groups or matches by."""
    labels: set[str] = set()
    for grouped in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        labels |= {word.strip() for word in grouped.split(",") if word.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        labels |= set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*[=!]~?", matchers))
    bare = re.sub(r"\{[^}]*\}|\[[^]]*\]|\b(?:by|without)\s*\([^)]*\)|\d+(?:\.\d+)?", " ", expr)
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare))
    return words - PROMQL_WORDS, labels


def queries(board: dict) -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]


def test_the_query_reader_finds_names_and_labels():
    names, labels = asked_for(
        'histogram_quantile(0.95, sum by (task, le) (rate(x_bucket{state=~"A|B"}[5m]))) / y'
    )
    assert (names, labels) == ({"x_bucket", "y"}, {"task", "le", "state"})


def test_every_panel_asks_for_metrics_and_labels_the_processes_export(red, alice):
    fleet(red)  # rows, so that the fleet's families have samples whose labels can be read
    cookies = session_of(alice)
    with console_server() as console, gateway_server() as gateway:
        seen = exported(httpx.get(f"{console}/metrics", cookies=cookies, timeout=10).text)
        from_gateway = httpx.get(f"{gateway}/metrics", cookies=cookies, timeout=10).text
    for name, found in exported(from_gateway).items():
        seen[name] |= found
    boards = sorted(BOARDS.glob("*.json"))
    assert [b.name for b in boards] == ["berth-console.json", "berth-gateway.json"]
    wrong = []
    for path in boards:
        board = json.loads(path.read_text())
        assert board["panels"], path.name
        for title, expr in queries(board):
            names, labels = asked_for(expr)
            if not names:
                wrong.append(f"{path.name} {title!r}: names no metric")
            wrong += [f"{path.name} {title!r}: {n} is not exported" for n in names - set(seen)]
            sampled = [seen[n] for n in names & set(seen) if seen[n]]
            if sampled:  # labels can be checked where the processes print samples
                on_them = set().union(*sampled) | {"le"}
                wrong += [f"{path.name} {title!r}: no label {lab}" for lab in labels - on_them]
    assert wrong == []


def test_every_panel_reads_the_boards_prometheus_and_has_a_unique_id():
    for path in sorted(BOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        ids = [panel["id"] for panel in board["panels"]]
        assert len(ids) == len(set(ids)), path.name
        assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]
        for panel in board["panels"]:
            if panel["type"] != "row":
                assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
                assert panel["targets"], panel["title"]
