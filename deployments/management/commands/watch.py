import asyncio
import signal
from typing import Any

from django.core.management.base import BaseCommand

from deployments.watcher import watch_all


class Command(BaseCommand):
    help = "Watch every cluster: observe copies, collect engine logs (one process; see watcher.py)."
    # Checked once, with migrate, before `make run` starts it: the checks would import every
    # URL and view, which a watcher never serves.
    requires_system_checks: list[str] = []

    def handle(self, *args: Any, **options: Any) -> None:
        asyncio.run(self.run())

    async def run(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        self.stdout.write("Watching clusters.")
        await watch_all(stop)
