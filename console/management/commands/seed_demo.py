from typing import Any

from django.core.management.base import BaseCommand

from console.demo import DEMO_USERS, seed_demo


class Command(BaseCommand):
    help = "Create the demo team, users, simulated cluster and catalog (safe to run again)."

    def handle(self, *args: Any, **options: Any) -> None:
        seed_demo()
        self.stdout.write("Demo ready. Logins:")
        for username, password, role in DEMO_USERS:
            self.stdout.write(f"  {username:<9} {password:<15} ({role})")
