"""Words for catalog values in templates."""

from __future__ import annotations

from django import template

from catalog.models import Task
from placement import words

register = template.Library()
TASK_LABELS = dict(Task.choices)


@register.filter
def task_labels(tasks: list[str] | None) -> str:
    """["chat", "tool_calling"] → "Chat, Tool calling"."""
    return ", ".join(TASK_LABELS.get(task, task) for task in tasks or []) or "—"


@register.filter
def per_second(value: int | None) -> str:
    """A download speed (bytes a second) in MiB/s."""
    return words.bytes_per_second(value)
