from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.loader import CATALOG_FILE, CatalogError, load_catalog


class Command(BaseCommand):
    help = "Load (or refresh) the curated model catalog from catalog/data/models.json."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", type=Path, default=CATALOG_FILE)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            models = load_catalog(options["file"])
        except CatalogError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"Catalog loaded: {len(models)} models.")
