"""What every conformance module starts from: the tiny model, and a folder for its engines."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from catalog.tiny_model import write_tiny_model
from tests.real_engines import engine_readable_folder


@pytest.fixture(scope="module")
def engine_home() -> Iterator[Path]:
    """Where the engines, which run as an unprivileged user, read models and keep their files."""
    with engine_readable_folder() as folder:
        yield folder


@pytest.fixture(scope="module")
def tiny(engine_home) -> Path:
    return write_tiny_model(engine_home / "models" / "tiny-llama").folder


@pytest.fixture(scope="module")
def state_dir(engine_home) -> Path:
    folder = engine_home / "engines"
    folder.mkdir()
    return folder


@pytest.fixture
def engine_tmp(engine_home) -> Path:
    """A test's own folder the engine can read (pytest's tmp_path may be closed to it)."""
    return Path(tempfile.mkdtemp(dir=engine_home))
