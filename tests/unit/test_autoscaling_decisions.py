"""What the autoscaler decides from the load (deployments/autoscaling.py): copies for the load
within the bounds, changed only after the load held for the window (short up, long down),
every change said with its numbers; and the policy's bad values refused naming the field."""

from __future__ import annotations

import pytest

from deployments.autoscaling import Load, Pending, Policy, PolicyRefused, decide, parse
from deployments.waking import FIRST_WAKE_GUESS_S, expected_wait_s

POLICY = Policy(min_copies=1, max_copies=8, target_in_flight=4, up_window_s=10, down_window_s=60)


def test_load_above_the_target_adds_copies_once_it_held_for_the_up_window():
    busy = Load(in_flight=14)
    first = decide(POLICY, busy, 2, None, now=100.0)
    assert first.copies == 2 and first.pending == Pending(4, 100.0)  # waiting for its window
    still = decide(POLICY, busy, 2, first.pending, now=105.0)
    assert still.copies == 2 and still.pending == Pending(4, 100.0)
    done = decide(POLICY, busy, 2, still.pending, now=110.0)
    assert done.copies == 4 and done.pending is None
    assert done.why == (
        "2 → 4 copies: 14 requests in flight for 2 copies, target 4 per copy (above it for 10 s)"
    )


def test_load_below_waits_the_longer_down_window_and_a_burst_meanwhile_starts_it_over():
    quiet = Load(in_flight=1)
    waiting = decide(POLICY, quiet, 4, None, now=0.0)
    assert waiting.copies == 4 and waiting.pending == Pending(1, 0.0)
    assert decide(POLICY, quiet, 4, waiting.pending, now=59.0).copies == 4
    burst = decide(POLICY, Load(in_flight=30), 4, waiting.pending, now=59.5)
    assert burst.pending == Pending(8, 59.5)  # the other way: a new window
    back = decide(POLICY, quiet, 4, burst.pending, now=60.0)
    assert back.copies == 4 and back.pending == Pending(1, 60.0)
    gone = decide(POLICY, quiet, 4, back.pending, now=120.0)
    assert gone.copies == 1
    assert gone.why.startswith("4 → 1 copy: 1 requests in flight for 4 copies")
    assert "(below it for 60 s)" in gone.why


def test_load_matching_the_copies_clears_a_waiting_wish():
    matched = decide(POLICY, Load(in_flight=8), 2, Pending(4, 0.0), now=5.0)
    assert matched.copies == 2 and matched.pending is None


def test_the_bounds_hold_and_load_alone_never_reaches_zero():
    floor = Policy(min_copies=0, max_copies=3, up_window_s=0, down_window_s=0)
    assert decide(floor, Load(in_flight=0), 2, None, now=0.0).copies == 1
    assert decide(floor, Load(in_flight=500), 1, None, now=0.0).copies == 3


def test_waiting_in_the_engines_counts_as_load_and_is_said():
    eager = Policy(min_copies=1, max_copies=8, target_in_flight=4, up_window_s=0)
    decision = decide(eager, Load(in_flight=4, waiting=8), 1, None, now=0.0)
    assert decision.copies == 3
    assert "4 requests in flight and 8 waiting in the engines for 1 copy" in decision.why


def test_a_slow_first_token_asks_one_more_copy_than_the_load_alone():
    ttft = Policy(min_copies=1, max_copies=8, target_ttft_ms=500, up_window_s=0)
    slow = decide(ttft, Load(in_flight=2, ttft_ms=900), 1, None, now=0.0)
    assert slow.copies == 2 and "time to first token 900 ms" in slow.why
    fast = decide(ttft, Load(in_flight=2, ttft_ms=200), 1, None, now=0.0)
    assert fast.copies == 1


def test_copies_outside_new_bounds_move_at_once_and_only_those():
    narrower = Policy(min_copies=2, max_copies=3)
    assert decide(narrower, Load(in_flight=0), 5, None, now=0.0).copies == 3
    assert decide(narrower, Load(in_flight=0), 1, None, now=0.0).copies == 2


def test_the_windows_default_to_the_settings(settings):
    settings.AUTOSCALE_UP_WINDOW_S, settings.AUTOSCALE_DOWN_WINDOW_S = 7, 90
    policy = Policy(min_copies=1, max_copies=2)
    assert (policy.up_window, policy.down_window) == (7.0, 90.0)


def test_a_good_policy_is_read_with_its_defaults():
    assert parse(None) is None
    policy = parse({"min_copies": 0, "max_copies": 4})
    assert policy == Policy(0, 4, 4.0, None, None, None, None)
    assert parse(policy.as_json()) == policy


@pytest.mark.parametrize(
    "raw,field,words",
    [
        ([1, 2], "autoscaling", "give an object"),
        ({"max_copies": 2}, "autoscaling.min_copies", "required"),
        ({"min_copies": 3, "max_copies": 2}, "autoscaling.min_copies", "is above max_copies (2)"),
        ({"min_copies": 1, "max_copies": 1001}, "autoscaling.max_copies", "from 1 to 1000"),
        ({"min_copies": -1, "max_copies": 2}, "autoscaling.min_copies", "-1 is not allowed"),
        ({"min_copies": 1.5, "max_copies": 2}, "autoscaling.min_copies", "a whole number"),
        ({"min_copies": True, "max_copies": 2}, "autoscaling.min_copies", "a whole number"),
        ({"min_copies": 1, "max_copies": 2, "target_in_flight": 0}, "autoscaling.target_in_flight", "above 0"),
        ({"min_copies": 1, "max_copies": 2, "target_ttft_ms": -5}, "autoscaling.target_ttft_ms", "above 0"),
        ({"min_copies": 1, "max_copies": 2, "up_window_s": -1}, "autoscaling.up_window_s", "from 0 to 86400"),
        ({"min_copies": 1, "max_copies": 2, "down_window_s": "5m"}, "autoscaling.down_window_s", "'5m'"),
        ({"min_copies": 1, "max_copies": 2, "idle_minutes": 10}, "autoscaling.idle_minutes", "set min_copies to 0"),
        ({"min_copies": 0, "max_copies": 2, "idle_minutes": 0}, "autoscaling.idle_minutes", "from 1 to 10080"),
        ({"min_copies": 0, "max_copies": 2, "idle_minutes": 10081}, "autoscaling.idle_minutes", "from 1 to 10080"),
        ({"min_copies": 0, "max_copies": 2, "idle_minutes": "5"}, "autoscaling.idle_minutes", "'5' is not allowed"),
        ({"min_copies": 1, "max_copies": 2, "scale": 3}, "autoscaling.scale", "unknown"),
    ],
)  # fmt: skip
def test_bad_policies_are_refused_naming_the_field(raw, field, words):
    with pytest.raises(PolicyRefused) as refused:
        parse(raw)
    assert refused.value.field == field
    assert words in refused.value.message


IDLE_AFTER_10 = Policy(0, 4, idle_minutes=10)


def test_no_request_for_the_idle_time_goes_to_zero_and_says_so():
    quiet = Load(in_flight=0)
    assert decide(IDLE_AFTER_10, quiet, 2, None, now=1000, idle_s=599).copies == 2
    idle = decide(IDLE_AFTER_10, quiet, 2, None, now=1000, idle_s=600)
    assert idle.copies == 0 and idle.pending is None
    assert idle.why == "2 → 0 copies: no request for 10 min; idle until the next request wakes it"


def test_a_request_in_flight_or_a_policy_that_cannot_idle_never_goes_to_zero():
    busy = decide(IDLE_AFTER_10, Load(in_flight=1), 1, None, now=1000, idle_s=3600)
    assert busy.copies == 1
    never = Policy(0, 4)  # min 0 without an idle time: load alone keeps one copy
    assert decide(never, Load(in_flight=0), 1, None, now=1000, idle_s=3600).copies == 1
    assert not never.may_idle and IDLE_AFTER_10.may_idle


def test_new_bounds_settle_the_copies_and_wake_an_idle_one_only_when_it_cannot_idle():
    assert IDLE_AFTER_10.settle(0) == 0  # stays idle
    assert Policy(0, 4).settle(0) == 1  # cannot idle: one copy
    assert Policy(2, 4).settle(0) == 2
    assert Policy(1, 3).settle(7) == 3


def test_a_waking_client_is_told_the_last_cold_start_less_what_it_waited():
    assert expected_wait_s(None, None, now=100) == FIRST_WAKE_GUESS_S
    assert expected_wait_s(90.0, 40.0, now=100) == 30
    assert expected_wait_s(0.0, 40.0, now=100) == 1  # overdue: try again very soon
