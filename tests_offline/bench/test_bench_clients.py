"""The latency benchmark's clients time what they say: against the engine double, directly and through a
real adapter on loopback. A client that stopped reading early, or timed the wrong moment, would make the
benchmark's figures wrong without failing it.
"""
from __future__ import annotations

import time

import pytest

from benchmarks.bench_clients import CLIENTS
from tests_offline.adapter_helpers import completion_body
from tests_offline.fake_engine import KEY


@pytest.fixture(params=["direct", "adapter"])
def target(request, engine, adapter):
    return engine.socket_path if request.param == "direct" else adapter.port


@pytest.mark.parametrize("kind", sorted(CLIENTS))
def test_whole_answers_are_read_to_their_end_on_one_connection(kind, target, engine):
    client = CLIENTS[kind](target, completion_body(), KEY)
    try:
        times = [client.call(stream=False) for _ in range(5)]
    finally:
        client.close()
    # Five answers on one keep-alive connection: any byte left unread would have broken the next call.
    assert engine.requests == 5 and all(0 < t < 5 for t in times)


@pytest.mark.parametrize("kind", sorted(CLIENTS))
def test_stream_is_timed_at_its_first_event_and_read_to_its_last(kind, target, engine):
    engine.chunks, engine.token_delay_s = 3, 0.3
    client = CLIENTS[kind](target, completion_body(stream=True), KEY)
    try:
        began = time.monotonic()
        first = client.call(stream=True)
        whole = time.monotonic() - began
        assert engine.chunks_sent == 3  # the call returned only after the whole stream
        second = client.call(stream=True)  # and left the connection ready for the next one
    finally:
        client.close()
    assert first < 0.25 and second < 0.25 and whole >= 0.6


@pytest.mark.parametrize("kind", sorted(CLIENTS))
def test_an_error_answer_is_not_timed_as_an_answer(kind, adapter, engine):
    client = CLIENTS[kind](adapter.port, completion_body(), "wrong-key")
    try:
        with pytest.raises(RuntimeError, match="not a 200 answer.*401"):
            client.call(stream=False)
    finally:
        client.close()
    assert engine.requests == 0
