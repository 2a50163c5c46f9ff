"""The SDK's fit check with allow_moves: the body it sends, and the moves it reads back (the
console's side is tests/integration/test_fit_check_moves.py)."""

from __future__ import annotations

from berth_sdk import FitCheck, Move
from berth_sdk._calls import fit_check

ESTIMATE = {"weights_gb": 1, "kv_cache_gb": 1, "activations_gb": 1, "overhead_gb": 1,
            "total_gb": 4, "total_bytes": 4 << 30, "kv_cache_bytes_per_token": 1,
            "tensor_parallel": 1, "max_model_len": 8192}  # fmt: skip


def test_allow_moves_is_sent_only_when_asked():
    asked = fit_check("Qwen/Qwen3-8B", "bf16", "frag", 1, 1, {}, allow_moves=True)
    assert asked.body["allow_moves"] is True
    assert "allow_moves" not in fit_check("Qwen/Qwen3-8B", "bf16", "frag", 1, 1, {}).body


def test_the_moves_are_read_in_order_and_another_teams_stays_unnamed():
    answer = {"fit_now": 0, "fit_empty": 2, "suggested_accelerators_per_copy": None,
              "estimate": ESTIMATE, "placed": [], "not_placed": [], "notices": [],
              "moves": [{"deployment": None, "copy": None, "gb": 39.8,
                         "from": {"machine": "m1", "accelerators": [1]},
                         "to": {"machine": "m1", "accelerators": [0]}}],
              "moves_words": "Fits after moving 1 copy: another team's copy of 0.5 GPU (…)"}  # fmt: skip
    fit = FitCheck.from_api(answer)
    assert fit.moves == [Move(None, None, "m1", [1], "m1", [0])]
    assert fit.moves_words.startswith("Fits after moving 1 copy")
    plain = FitCheck.from_api({**answer, "moves": None, "moves_words": ""})
    assert plain.moves is None and plain.moves_words == ""
