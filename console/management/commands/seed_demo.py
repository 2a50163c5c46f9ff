from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from console.demo import seed_demo
from console.demo_passwords import DEMO_USERS


class Command(BaseCommand):
    help = "Create the demo team, users, simulated cluster and catalog (safe to run again)."

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEMO:
            raise CommandError(
                "seed_demo creates users with well-known passwords: it runs only in a demo, with "
                "BERTH_DEMO=1 (make run sets it). For a real install, create users with "
                "`python manage.py createsuperuser` instead."
            )
        seed_demo()
        self.stdout.write("Demo ready. Logins:")
        for username, password, role in DEMO_USERS:
            self.stdout.write(f"  {username:<9} {password:<15} ({role})")
