"""Template filters for units and badges: thin wrappers of placement.words, so that every page
writes memory, shares, counts and times as the messages and the API do."""

from __future__ import annotations

from datetime import datetime

from django import template

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
def when(value: datetime | None) -> str:
    return words.when(value)


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
