from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from console import audit
from console.models import ApiKey


class Command(BaseCommand):
    help = "Create a personal API key for USERNAME; the key is printed once, as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="command line")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user named {options['username']!r}. Create the user first.")
        key, secret = ApiKey.issue(user, options["name"])
        audit.record(
            None,
            audit.API_KEY_ISSUED,
            f"API key “{key.name}” of {user}",
            by="manage.py createapikey",
        )
        self.stdout.write("Store this key now; it cannot be shown again:")
        self.stdout.write(secret)
