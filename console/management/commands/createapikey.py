from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from console import keys
from console.models import KeyScope
from placement.words import when

OPTION = {"name": "--name", "scope": "--scope", "expires_in_days": "--expires-in"}


def days(text: str) -> int:
    """--expires-in's value: whole days, 1 to keys.MAX_DAYS."""
    try:
        value = int(text)
    except ValueError:
        raise CommandError(f"--expires-in {text!r}: give a whole number of days") from None
    if not 1 <= value <= keys.MAX_DAYS:
        raise CommandError(f"--expires-in {value}: give 1 to {keys.MAX_DAYS} days")
    return value


class Command(BaseCommand):
    help = "Create a personal API key for USERNAME; the key is printed once, as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="command line")
        parser.add_argument(
            "--scope",
            default=KeyScope.OPERATE,
            help="read (GET, fit check, estimate), chat (the gateway only) or operate "
            "(everything the user's roles allow; the default)",
        )
        parser.add_argument(
            "--expires-in", metavar="DAYS", help="the key expires after DAYS days (default never)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user named {options['username']!r}. Create the user first.")
        expires = options["expires_in"]
        try:
            key, secret = keys.issue(
                user,
                options["name"],
                options["scope"],
                days(expires) if expires is not None else None,
                by="manage.py createapikey",
            )
        except keys.KeyRefused as refused:
            raise CommandError(f"{OPTION[refused.field]}: {refused.message}") from None
        until = f", expires {when(key.expires_at)}" if key.expires_at else ""
        self.stdout.write(f"Scope {key.scope}{until}.")
        self.stdout.write("Store this key now; it cannot be shown again:")
        self.stdout.write(secret)
