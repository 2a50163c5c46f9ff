"""Prometheus' text format, written by hand (the figures come from rows, not from a process's own
counters): one home for how a metric family and its labels are written."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Sample = tuple[Mapping[str, str], Any]


def escaped(value: str) -> str:
    """A label's value as the format quotes it: a name may hold a quote or a backslash."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labelled(metric: str, labels: Mapping[str, str]) -> str:
    if not labels:
        return metric
    inner = ",".join(f'{name}="{escaped(str(value))}"' for name, value in labels.items())
    return f"{metric}{{{inner}}}"


def family(metric: str, kind: str, doc: str, samples: Iterable[Sample]) -> list[str]:
    """A family's HELP and TYPE lines and its samples (a missing value reads 0)."""
    lines = [f"# HELP {metric} {doc}", f"# TYPE {metric} {kind}"]
    return lines + [f"{labelled(metric, labels)} {value or 0}" for labels, value in samples]
