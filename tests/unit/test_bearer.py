"""The key in an Authorization header, read one way by the console's API and the gateway."""

from __future__ import annotations

import pytest

from console.keys import bearer


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ("Bearer berth_abc", "berth_abc"),
        ("bearer berth_abc ", "berth_abc"),
        ("BEARER  berth_abc", "berth_abc"),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer ", None),
        ("Bearer", None),
        ("", None),
    ],
)
def test_only_a_bearer_header_with_a_token_gives_a_key(header, key):
    assert bearer(header) == key
