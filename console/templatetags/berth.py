"""Template filters for units, badges and times: thin wrappers of placement.words (memory,
shares, counts, as the messages and the API write them) and of console.time_zones (every time
with its date and zone, in the viewer's zone)."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console import time_zones
from console.choices import Badge, StateChoices
from placement import words

register = template.Library()


@register.filter
def gib(value: int | None) -> str:
    return words.gib(value)


@register.filter
def percent(value: float | None, of: float | None = None) -> str:
    """{{ share|percent }} → "45%"; {{ done|percent:total }} → a part of a whole, at most 100%."""
    return words.percent(value, of)


@register.filter
def when(value: datetime | None, precision: str = "") -> str:
    """{{ e.at|when }} → "2 Dec 2026, 04:12 CET" in the viewer's zone; {{ line.at|when:"seconds" }}
    adds the seconds."""
    if value is None:
        return words.NOTHING
    return time_zones.exact(value, seconds=precision == "seconds")


@register.filter
def ago(value: datetime | None) -> str | SafeString:
    """{{ key.last_used_at|ago }} → "3 minutes ago", with the exact time on hover."""
    if value is None:
        return words.NOTHING
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        time_zones.exact(value, seconds=True),
        time_zones.ago(value),
    )


@register.filter
def badge(state: object) -> str:
    """A state's badge colour (CSS class badge-<colour>), from the state's own vocabulary.
    Rows' state fields give their states (console.choices.StateField), never bare text."""
    if isinstance(state, StateChoices):
        return state.colour
    return Badge.GREY  # not a state of any vocabulary (e.g. none yet)


@register.filter
def billions(value: int | None) -> str:
    return words.billions(value)
