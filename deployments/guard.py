"""The model-level guard that keeps state changes inside deployments/transitions.py.

Only code running inside `state_change_allowed()` (which transitions.py alone enters) may change a
guarded row's state; `.save()`, `QuerySet.update(state=…)` and `bulk_update([...], ["state"])`
anywhere else raise StateChangeRefused.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import models

_allowed: ContextVar[bool] = ContextVar("state_change_allowed", default=False)


class StateChangeRefused(Exception):
    """A state was changed outside deployments/transitions.py."""


@contextmanager
def state_change_allowed() -> Iterator[None]:
    token = _allowed.set(True)
    try:
        yield
    finally:
        _allowed.reset(token)


def refuse(detail: str) -> None:
    if not _allowed.get():
        raise StateChangeRefused(f"{detail}: states change only through deployments/transitions.py")


class StateGuardedQuerySet(models.QuerySet[Any]):
    def update(self, **kwargs: Any) -> int:
        if "state" in kwargs:
            refuse("QuerySet.update(state=…)")
        return super().update(**kwargs)

    def bulk_update(self, objs: Any, fields: Sequence[str], *args: Any, **kwargs: Any) -> int:
        if "state" in fields:
            refuse("bulk_update of state")
        return super().bulk_update(objs, fields, *args, **kwargs)

    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> list[Any]:
        objs = list(objs)
        for obj in objs:
            obj.check_initial_state()
        return super().bulk_create(objs, *args, **kwargs)


class StateGuardedModel(models.Model):
    """A model whose `state` may only be changed by transitions.py."""

    INITIAL_STATE = ""
    _saved_state: str | None = None

    objects = StateGuardedQuerySet.as_manager()

    class Meta:
        abstract = True

    @classmethod
    def from_db(cls, db: Any, field_names: Any, values: Any) -> Any:
        instance = super().from_db(db, field_names, values)
        instance._saved_state = instance.__dict__.get("state")
        return instance

    def check_initial_state(self) -> None:
        if self.state != self.INITIAL_STATE:  # type: ignore[attr-defined]
            refuse(f"creating a {type(self).__name__} in state {self.state}")  # type: ignore[attr-defined]

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding:
            self.check_initial_state()
        elif self.state != self._saved_state:  # type: ignore[attr-defined]
            refuse(f"{type(self).__name__}.save() with a new state")
        super().save(*args, **kwargs)
        self._saved_state = self.state  # type: ignore[attr-defined]
