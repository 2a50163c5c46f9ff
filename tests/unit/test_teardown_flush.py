"""The test suite's own teardown: a flush PostgreSQL aborted is tried again, however Django wraps it."""

from django.core.management.base import CommandError
from django.db import OperationalError

from tests.conftest import aborted_by_postgres


def flush_error_from(cause: Exception) -> CommandError:
    try:
        try:
            raise cause
        except Exception as error:
            raise CommandError("Database test_berth couldn't be flushed.") from error
    except CommandError as wrapped:
        return wrapped


def test_a_flush_aborted_by_the_database_is_tried_again_though_django_wraps_it():
    assert aborted_by_postgres(flush_error_from(OperationalError("deadlock detected")))
    assert aborted_by_postgres(OperationalError("deadlock detected"))


def test_a_flush_that_failed_for_another_reason_is_not():
    assert not aborted_by_postgres(flush_error_from(ValueError("no such table")))
    assert not aborted_by_postgres(CommandError("Database test_berth couldn't be flushed."))
