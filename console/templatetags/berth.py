"""Template filters for units and badges: thin wrappers of placement.words, so that every page
writes memory and counts as the messages and the API do."""

from __future__ import annotations

from django import template

from deployments.choices import badge_colour as colour_of
from placement import words

register = template.Library()


@register.filter
def gib(value: int | None) -> str:
    return words.gib(value)


@register.filter
def badge_colour(state: str) -> str:
    return colour_of(state)


@register.filter
def billions(value: int | None) -> str:
    return words.billions(value)
