"""How much of an accelerator's memory the engine of one copy is given (vLLM's
--gpu-memory-utilization), and how many accelerators a copy spans (its tensor parallel size).

The one home of these rules (DESIGN §4): the planner, the editor, the scale dialog, the launcher
and the API all ask here, so a default or a cap is written once.
"""

from __future__ import annotations

import math

DEFAULT_SHARE = 0.8  # of a copy's budget: 0.8 x s on a shared GPU, 0.8 of a whole one
SHARED_LIMIT = 0.9  # at most 0.9 x s on a shared GPU: neighbours use memory outside budgets
DEFAULT_SHARE_OF_SLICE = 0.9  # a MIG slice is the copy's alone
HIGH_SHARE = 0.95  # above it vLLM has too little room outside its budget and may not start


def tensor_parallel(size: float) -> int:
    """The accelerators one copy of `size` accelerators spans (1 for a share of one)."""
    return int(size) if size > 1 else 1


def default_share(size: float) -> float:
    """The engine's share when the operator sets none, for a copy of `size` accelerators."""
    return four_decimals_down(DEFAULT_SHARE * size) if size < 1 else DEFAULT_SHARE


def share_limit(size: float) -> float:
    """The highest share an operator may give the engine of a copy of `size` accelerators."""
    return four_decimals_down(SHARED_LIMIT * size) if size < 1 else 1.0


def within_limit(share: float, size: float) -> bool:
    # A hair of slack: 0.9 x 0.3 is 0.27000000000000002 in floating point.
    return size >= 1 or share <= SHARED_LIMIT * size + 1e-9


def engine_share(size: float, asked: float | None) -> float:
    """The share the engine gets: what the operator asked for within its limit, else the
    default for the copy's size."""
    return min(float(asked), share_limit(size)) if asked else default_share(size)


def four_decimals_down(value: float) -> float:
    # The engine gets the value printed on its command line; rounding down keeps it in budget.
    return math.floor(value * 10_000 + 1e-9) / 10_000
