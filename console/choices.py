"""The base of every state vocabulary: each state says its value, its badge colour and its
label on one line, and a row's state field gives back the state itself (not bare text), so a
page can ask any state for its colour without knowing which vocabulary it belongs to.

The vocabularies live in their apps (deployments/choices.py, catalog/models.py,
clusters/models.py); this module is console's base layer, below all of them."""

from __future__ import annotations

import enum
from typing import Any

from django.db import models
from django.db.models.query_utils import DeferredAttribute


class Badge(enum.StrEnum):
    """The badge colours static/css/berth.css defines (CSS classes badge-grey, badge-blue …)."""

    GREY = "grey"
    BLUE = "blue"
    GREEN = "green"
    AMBER = "amber"
    RED = "red"


class StateChoices(models.TextChoices):
    """A vocabulary of states, written `NAME = value, Badge.COLOUR, label`.

    Django takes the last item as the label and hands the rest to __new__, which keeps the
    colour on the state."""

    colour: Badge

    def __new__(cls, value: str, colour: Badge) -> StateChoices:
        state = str.__new__(cls, value)
        state._value_ = value
        state.colour = colour
        return state


class StateAttribute(DeferredAttribute):
    """Keeps a row's state as a member of its vocabulary, however it was set (from the
    database, in the constructor, or by assignment), so `row.state.colour` always works."""

    field: StateField

    def __set__(self, instance: models.Model, value: Any) -> None:
        instance.__dict__[self.field.attname] = self.field.as_state(value)


class StateField(models.CharField):  # type: ignore[type-arg]
    """A CharField holding one state of `vocabulary`; the database sees plain text."""

    descriptor_class = StateAttribute

    def __init__(self, vocabulary: type[StateChoices], **kwargs: Any) -> None:
        self.vocabulary = vocabulary
        kwargs.setdefault("max_length", 16)
        kwargs.setdefault("choices", vocabulary.choices)
        super().__init__(**kwargs)

    def as_state(self, value: Any) -> Any:
        # An unknown value stays as it is, so validation reports it rather than this line.
        if isinstance(value, str) and value in self.vocabulary.values:
            return self.vocabulary(value)
        return value

    def deconstruct(self) -> Any:
        # Migrations see a plain CharField with its choices: the vocabulary is Python's only,
        # so using this field changes no schema and writes no migration.
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.CharField", args, kwargs

    def clone(self) -> StateField:
        name, _path, args, kwargs = super().deconstruct()
        return StateField(self.vocabulary, *args, **kwargs)
