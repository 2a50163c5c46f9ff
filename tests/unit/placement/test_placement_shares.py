"""The engine's memory share and the tensor parallel size: one rule for every page and the
launcher (placement/shares.py)."""

from __future__ import annotations

import pytest

from placement import shares


@pytest.mark.parametrize(
    "size,default,limit",
    [(0.25, 0.2, 0.225), (0.3, 0.24, 0.27), (0.5, 0.4, 0.45), (1.0, 0.8, 1.0), (4.0, 0.8, 1.0)],
)
def test_a_copy_gets_four_fifths_of_its_share_and_at_most_nine_tenths(size, default, limit):
    assert shares.default_share(size) == default
    assert shares.share_limit(size) == limit


def test_what_the_operator_asks_for_is_kept_within_the_limit():
    assert shares.engine_share(0.5, 0.3) == 0.3
    assert shares.engine_share(0.5, 0.9) == 0.45
    assert shares.engine_share(1.0, 0.97) == 0.97
    assert shares.engine_share(0.5, None) == 0.4


def test_the_share_is_rounded_down_so_the_engine_stays_in_its_budget():
    assert shares.default_share(1 / 3) == 0.2666


def test_a_share_just_at_the_limit_is_within_it_despite_floating_point():
    assert shares.within_limit(0.9 * 0.3, 0.3)
    assert not shares.within_limit(0.28, 0.3)
    assert shares.within_limit(1.0, 2.0)


@pytest.mark.parametrize("size,tp", [(0.25, 1), (1.0, 1), (2.0, 2), (8.0, 8)])
def test_a_copy_spans_as_many_accelerators_as_its_whole_size(size, tp):
    assert shares.tensor_parallel(size) == tp
