"""A stream relayed without the usage the gateway asked for on its client's behalf: the client
reads what vLLM would have sent it had nobody asked, its fingerprint on the terminal chunk."""

from __future__ import annotations

from gateway.sse import UsageHidden

# vLLM 0.32's chunks when usage is asked for: the fingerprint only on the trailing usage chunk.
TOKEN = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}'
TERMINAL = b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}'
USAGE = (
    b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2},'
    b'"system_fingerprint":"vllm-0.32.0-e57c2f9a"}'
)
DONE = b"data: [DONE]"


def relayed(*pieces: bytes) -> bytes:
    hidden = UsageHidden()
    return b"".join(hidden.relay(piece) for piece in pieces) + hidden.end()


def test_the_usage_chunk_is_left_out_and_its_fingerprint_put_on_the_terminal_chunk():
    stream = b"\n\n".join([TOKEN, TERMINAL, USAGE, DONE]) + b"\n\n"
    assert relayed(stream) == (
        TOKEN + b"\n\n"
        + b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"length"}],'
        + b'"system_fingerprint":"vllm-0.32.0-e57c2f9a"}\n\n'
        + DONE + b"\n\n"
    )  # fmt: skip


def test_events_cut_across_pieces_are_passed_on_whole():
    stream = b"\n\n".join([TOKEN, TERMINAL, USAGE, DONE]) + b"\n\n"
    cuts = [stream[:10], stream[10:95], stream[95:200], stream[200:]]
    assert relayed(*cuts) == relayed(stream)
    assert b'"usage"' not in relayed(*cuts)


def test_a_stream_cut_short_still_gets_what_was_held():
    assert relayed(TOKEN + b"\n\n" + TERMINAL + b"\n\n") == (TOKEN + b"\n\n" + TERMINAL + b"\n\n")
