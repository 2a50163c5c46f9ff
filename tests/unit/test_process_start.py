"""What a background process loads when it starts: a test run starts hundreds of them, and an
operator's restart waits for each."""

import subprocess
import sys

from tests.processes import ROOT

LOADED_BY_A_WORKER = """
import sys
import django
django.setup()
from console.celery import app
app.loader.import_default_modules()  # where Celery's Django fixup would run the checks
print(sorted(m for m in ("console.urls", "twisted", "daphne.server") if m in sys.modules))
"""


def test_a_worker_starts_without_the_views_and_without_daphne():
    """Django's checks import every URL and view; daphne's app, Twisted. Neither serves a task."""
    loaded = subprocess.run(
        [sys.executable, "-c", LOADED_BY_A_WORKER],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "[]", loaded.stdout
