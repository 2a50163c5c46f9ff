"""What every conformance module starts from: the tiny model, and a folder for its engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog.tiny_model import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama").folder


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("engines")
