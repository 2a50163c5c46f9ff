"""What a stream's continuation asks of the next copy (gateway/resume.py); the whole path, with
a copy killed mid-stream, is in tests/integration/test_gateway.py."""

from __future__ import annotations

from gateway.resume import SoFar, continuation_body, continued_events, may_continue, sent_so_far

SENT = (
    b'data: {"id":"cmpl-a","choices":[{"index":0,"text":"Once"}]}\n\n'
    b'data: {"id":"cmpl-a","choices":[{"index":0,"text":" upon"}]}\n\n'
)


def test_a_completion_goes_on_from_its_prompt_and_the_text_sent_with_fewer_tokens_left():
    so_far = sent_so_far(SENT, chat=False)
    assert so_far == SoFar("cmpl-a", "Once upon", 2)
    asked = continuation_body(False, {"prompt": "Tell: ", "max_tokens": 10}, so_far)
    assert asked == {"prompt": "Tell: Once upon", "max_tokens": 8}


def test_a_chat_goes_on_from_the_assistants_message_without_a_new_reply():
    so_far = SoFar("chatcmpl-a", "Hello the", 2)
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 2}
    assert continuation_body(True, body, so_far) == {
        "messages": [{"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": "Hello the"}],
        "max_completion_tokens": 1,
        "continue_final_message": True,
        "add_generation_prompt": False,
    }  # fmt: skip


def test_the_next_copys_opening_is_dropped_and_its_events_carry_the_first_id():
    held = (
        b'data: {"id":"cmpl-b","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
        b'\n\ndata: {"id":"cmpl-b","choices":[{"index":0,"delta":{"content":" world"}}]}\n\n'
    )
    assert continued_events(held, SoFar("cmpl-a", "Hello", 1)) == (
        b'data: {"id":"cmpl-a","choices":[{"index":0,"delta":{"content":" world"}}]}\n\n'
    )


def test_several_choices_and_a_prompt_of_token_ids_are_not_continued(settings):
    settings.GATEWAY_STREAM_RESUMES = 1
    assert may_continue(True, {"messages": []}, 0)
    assert not may_continue(True, {"messages": [], "n": 2}, 0)
    assert not may_continue(False, {"prompt": [1, 2, 3]}, 0)
    assert not may_continue(True, {"messages": []}, 1)  # the one continuation is spent
