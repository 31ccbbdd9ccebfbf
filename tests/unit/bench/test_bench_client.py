"""Per-token latency and token counting from streamed chunks (the parts that must stay exact when one
chunk carries several tokens)."""

from __future__ import annotations

import asyncio

import pytest

from specq.pipeline.bench.client import (
    SendClock,
    _Stream,
    chunk_token_counts,
    fill_record,
    per_token_latencies,
    scale_counts,
    stream_record,
)
from specq.pipeline.report.models import RequestRecord
from tests.fake_openai import plan_chunks


class WordCounter:
    """A tokenizer stand-in whose tokens are whitespace-led words (like the synthetic server's)."""

    def encode(self, text: str) -> list[int]:
        return [hash(w) for w in text.split()]

    def counts_per_chunk(self, texts):
        return [len(t.split()) for t in texts]


def test_multi_token_chunk_gap_is_spread_over_its_tokens():
    # first chunk (1 token) at 100 ms, then chunks of 3, 1, 4 tokens every 30 ms
    itl, tpot = per_token_latencies([0.100, 0.130, 0.160, 0.190], [1, 3, 1, 4])
    assert itl == pytest.approx([0.01] * 3 + [0.03] + [0.0075] * 4)
    assert len(itl) == 8  # tokens after the first, never chunks
    assert tpot == pytest.approx(0.090 / 8)
    assert sum(itl) == pytest.approx(0.090)


def test_tokens_in_first_chunk_count_in_tpot_not_itl():
    itl, tpot = per_token_latencies([0.05, 0.07], [3, 2])
    assert itl == pytest.approx([0.01, 0.01])
    assert tpot == pytest.approx(0.02 / 4)


def test_empty_chunks_fold_their_gap_into_the_next():
    itl, _ = per_token_latencies([0.0, 0.01, 0.03], [1, 0, 2])
    assert itl == pytest.approx([0.015, 0.015])


def test_single_token_has_no_tpot():
    assert per_token_latencies([0.1], [1]) == ([], None)
    assert per_token_latencies([], []) == ([], None)


def test_uniform_schedule_recovers_the_true_itl():
    # 50 chunks, 2 ms apart, alternating 1 and 4 tokens: every token's ITL is gap / tokens
    times = [0.01 + 0.002 * j for j in range(50)]
    counts = [1 if j % 2 else 4 for j in range(50)]
    itl, tpot = per_token_latencies(times, counts)
    assert len(itl) == sum(counts) - counts[0]
    assert tpot == pytest.approx(0.002 * 49 / (sum(counts) - 1))


@pytest.mark.parametrize(
    "weights,total,expected",
    [
        ([7, 21, 14, 28], 10, [1, 3, 2, 4]),
        ([1, 1, 1], 3, [1, 1, 1]),
        ([0, 5], 2, [1, 1]),
        ([3, 3], 1, [1, 0]),
    ],
)
def test_scale_counts_is_proportional_and_exact(weights, total, expected):
    got = scale_counts(weights, total)
    assert got == expected and sum(got) == total


def test_counts_from_streamed_usage():
    counts, src, recount, mismatch = chunk_token_counts(["a", "b c", "d"], [1, 3, 4], 4, None)
    assert (counts, src, recount, mismatch) == ([1, 2, 1], "usage-stream", None, False)


def test_counts_from_tokenizer_agree_with_usage():
    counts, src, recount, mismatch = chunk_token_counts([" a", " b c d", " e"], [None] * 3, 5, WordCounter())
    assert (counts, src, recount, mismatch) == ([1, 3, 1], "tokenizer", 5, False)


def test_tokenizer_disagreement_is_flagged_and_usage_wins():
    counts, src, recount, mismatch = chunk_token_counts([" a", " b c d", " e"], [None] * 3, 7, WordCounter())
    assert src == "tokenizer" and recount == 5 and mismatch
    assert sum(counts) == 7


def test_counts_from_characters_without_tokenizer():
    counts, src, _, _ = chunk_token_counts(
        [" w00001", " w00002 w00003 w00004", " w00005"], [None] * 3, 5, None
    )
    assert (counts, src) == ([1, 3, 1], "chars")


def test_no_usage_no_tokenizer_is_marked_chunks():
    counts, src, _, _ = chunk_token_counts(["ab", "cd"], [None, None], None, None)
    assert src == "chunks" and counts == [1, 1]


def test_fill_record_uses_usage_as_the_output_count():
    rec = fill_record(
        RequestRecord(id="x", category="c"), [0.1, 0.2], [" a b", " c"], [None, None], 3, WordCounter()
    )
    assert rec.output_tokens == 3 and rec.tokenizer_tokens == 3 and rec.chunk_tokens == [2, 1]
    assert rec.ttft_s == 0.1 and rec.output_text == " a b c"


# A request on recorded timestamps (one clock, absolute seconds), as the synthetic server's `--stamp` run
# produces them: the start at 100 s, a new connection that takes 2 ms, the server reading the request
# 0.1 ms after the send, its schedule (first chunk of 3 tokens 20 ms after arrival, then one chunk every
# 4 ms) and each chunk received 0.3 ms after the server stamped it.
START, CONNECT, ARRIVE, TTFT, STEP, DELIVERY = 100.0, 0.002, 0.0001, 0.020, 0.004, 0.0003
SIZES = plan_chunks(4, 24, [2, 1, 3, 0], 1, 3)


def recorded_stream() -> tuple[_Stream, float]:
    sent = START + CONNECT
    s = _Stream(arrive=sent + ARRIVE)
    stamps = [sent + ARRIVE + TTFT + STEP * i for i in range(len(SIZES))]
    s.stamps = stamps
    s.times = [t + DELIVERY for t in stamps]
    s.texts = [" w" * n for n in SIZES]
    s.cumulative = [sum(SIZES[: i + 1]) for i in range(len(SIZES))]
    s.usage_completion = sum(SIZES)
    return s, sent


def test_ttft_and_chunk_times_count_from_the_send_not_from_the_connection():
    # The bug this guards against started the clock before the connection was set up, which put every
    # request's TTFT and chunk times CONNECT late: exact arithmetic on recorded times, no wall clock.
    s, sent = recorded_stream()
    end = s.times[-1] + 0.0005
    rec = stream_record(RequestRecord(id="x", category="c"), s, START, sent, end)
    assert rec.connect_s == pytest.approx(CONNECT, abs=1e-9)
    assert rec.server_arrival_s == pytest.approx(ARRIVE, abs=1e-7)
    assert rec.ttft_s == pytest.approx(ARRIVE + TTFT + DELIVERY, abs=1e-7)
    assert rec.e2e_s == pytest.approx(end - sent, abs=1e-9)
    assert rec.chunk_tokens == SIZES and rec.chunk_token_source == "usage-stream"
    # the client's delivery error against the server's send stamps, and against the schedule
    assert rec.server_chunk_times is not None
    assert [a - b for a, b in zip(rec.chunk_times, rec.server_chunk_times, strict=True)] == pytest.approx(
        [DELIVERY] * len(SIZES), abs=1e-6
    )
    assert rec.ttft_s - rec.server_arrival_s - TTFT == pytest.approx(DELIVERY, abs=1e-6)
    # without a send time from the trace the start is the origin, and nothing is called connection time
    rec = stream_record(RequestRecord(id="y", category="c"), s, START, None, end)
    assert rec.connect_s == 0 and rec.ttft_s == pytest.approx(CONNECT + ARRIVE + TTFT + DELIVERY, abs=1e-7)


def test_per_token_itl_is_exact_with_a_multi_token_first_chunk():
    s, sent = recorded_stream()
    rec = stream_record(RequestRecord(id="x", category="c"), s, START, sent, s.times[-1])
    itl, tpot = per_token_latencies(rec.chunk_times, rec.chunk_tokens)
    # the first chunk's 3 tokens have no gap to measure; every later token has exactly one sample, its
    # chunk's gap spread over its tokens
    assert SIZES[0] == 3 and len(itl) == 24 - 3
    expected = [STEP / n for n in SIZES[1:] for _ in range(n)]
    assert itl == pytest.approx(expected, abs=1e-6)
    truth, _ = per_token_latencies(rec.server_chunk_times or [], rec.chunk_tokens)
    assert itl == pytest.approx(truth, abs=1e-6)
    assert tpot == pytest.approx(STEP * (len(SIZES) - 1) / 23, abs=1e-6)


def test_the_send_clock_reads_its_clock_when_the_headers_go_out_and_the_last_send_counts():
    ticks = iter([1.5, 2.5])
    clock = SendClock(now=lambda: next(ticks))

    async def events() -> None:
        await clock.trace("connection.connect_tcp.started", {})
        assert clock.sent is None  # opening the connection is not the send
        await clock.trace("http11.send_request_headers.started", {})
        assert clock.sent == 1.5
        await clock.trace("http11.send_request_headers.complete", {})
        await clock.trace("http2.send_request_headers.started", {})  # a retry on a new connection

    asyncio.run(events())
    assert clock.sent == 2.5
