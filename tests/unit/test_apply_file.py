"""berth apply's reading of a file: YAML as the safe loader reads it, except that a date stays
the text it was written as (a model revision such as 2024-01-01 is a tag's name)."""

from __future__ import annotations

import yaml
from berth_sdk.cli.applying import Source


def test_a_date_stays_text_and_the_rest_reads_as_yaml_does():
    text = "revision: 2024-01-01\ncopies: 3\nmovable: yes\n"
    assert Source("f.yaml", text).document() == {
        "revision": "2024-01-01", "copies": 3, "movable": True
    }  # fmt: skip
    assert yaml.safe_load("revision: 2024-01-01")["revision"].isoformat() == "2024-01-01"
