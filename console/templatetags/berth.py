"""Template filters for units and badges: thin wrappers of placement.words, so that every page
writes memory, shares, counts and times as the messages and the API do."""

from __future__ import annotations

from datetime import datetime

from django import template

from deployments.choices import badge_colour as colour_of
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
def badge_colour(state: str) -> str:
    return colour_of(state)


@register.filter
def billions(value: int | None) -> str:
    return words.billions(value)
