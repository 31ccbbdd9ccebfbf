"""/metrics parsing against real LMDeploy captures, and the acceptance arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from specq.pipeline.bench.metrics import Scrape, acceptance, parse_metrics, server_check, settled_scrape

FIXTURES = Path(__file__).parents[2] / "fixtures" / "lmdeploy-metrics"


def load(name: str) -> Scrape:
    return parse_metrics((FIXTURES / name).read_text())


def test_parses_real_lmdeploy_spec_capture():
    s = load("dflash4.prom")
    assert s.prefix == "lmdeploy:"
    assert (s.drafts, s.draft_tokens, s.accepted) == (754.0, 3016.0, 0.0)
    assert s.per_pos == {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0}
    assert s.generation_tokens == 1024.0
    assert s.decode_time_sum == pytest.approx(10.250130414962769)
    assert s.decode_time_count == 4.0


def test_parses_awq_capture_and_baseline_capture():
    awq = load("awq-dflash4.prom")
    assert (awq.drafts, awq.draft_tokens) == (206.0, 824.0)
    base = load("base.prom")
    assert base.drafts == 0.0 and base.per_pos == {}
    assert base.generation_tokens == 1024.0 and base.decode_time_sum == pytest.approx(4.25597071647644)


def test_acceptance_from_a_real_capture_diffed_against_zero():
    acc = acceptance(Scrape(), load("dflash4.prom"))
    assert acc is not None
    # that capture's drafter accepted nothing: rate 0, τ exactly 1, 4 positions
    assert acc.acceptance_rate == 0.0 and acc.acceptance_length == 1.0
    assert acc.per_position == [0.0, 0.0, 0.0, 0.0]
    assert acc.draft_tokens / acc.drafts == 4.0


def test_no_drafts_means_no_acceptance():
    assert acceptance(load("base.prom"), load("base.prom")) is None


def test_acceptance_math_on_counter_diffs():
    before = Scrape(prefix="vllm:", drafts=10, draft_tokens=40, accepted=12, per_pos={0: 6, 1: 4, 2: 2, 3: 0})
    after = Scrape(
        prefix="vllm:", drafts=110, draft_tokens=440, accepted=212, per_pos={0: 86, 1: 64, 2: 42, 3: 20}
    )
    acc = acceptance(before, after)
    assert acc is not None
    assert acc.acceptance_rate == pytest.approx(200 / 400)
    assert acc.acceptance_length == pytest.approx(1 + 200 / 100)
    assert acc.per_position == pytest.approx([0.8, 0.6, 0.4, 0.2])
    assert sum(acc.per_position) == pytest.approx(acc.acceptance_length - 1)


def test_vllm_names_and_summing_over_engines():
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 5\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 7\n'
        "# TYPE vllm:spec_decode_num_draft_tokens counter\n"
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 36\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 18\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n"
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 10\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 2\n'
        "# TYPE vllm:generation_tokens counter\n"
        'vllm:generation_tokens_total{model_name="m"} 99\n'
    )
    s = parse_metrics(text)
    assert s.prefix == "vllm:" and s.drafts == 12 and s.draft_tokens == 36 and s.accepted == 18
    assert s.per_pos == {0: 12.0} and s.generation_tokens == 99


def test_malformed_text_is_not_fatal():
    s = parse_metrics("lmdeploy:spec_decode_num_drafts_total{engine=0 oops\n")
    assert not s.ok and "unparseable" in (s.error or "")


def test_server_check_rates():
    sc = server_check(
        Scrape(generation_tokens=100, decode_time_sum=1.0), Scrape(generation_tokens=600, decode_time_sum=3.5)
    )
    assert sc is not None and sc.server_decode_tokens_per_s == pytest.approx(200.0)
    # with the histogram's request count, each request's first token (produced before its decode time) is
    # left out, as the client's decode rate leaves it out: (500 − 10) tokens in 2.5 s
    sc = server_check(
        Scrape(generation_tokens=100, decode_time_sum=1.0, decode_time_count=2),
        Scrape(generation_tokens=600, decode_time_sum=3.5, decode_time_count=12),
    )
    assert sc is not None and sc.decode_requests == 10
    assert sc.server_decode_tokens_per_s == pytest.approx(490 / 2.5)


def test_settled_scrape_waits_until_two_scrapes_agree():
    values = iter([10, 15, 18, 20, 20, 20])
    calls = []

    def fetch() -> Scrape:
        v = next(values)
        calls.append(v)
        return Scrape(drafts=v, draft_tokens=4 * v, accepted=v)

    s, settled = settled_scrape(fetch, timeout_s=5, interval_s=0.0)
    assert settled and s.drafts == 20 and calls == [10, 15, 18, 20, 20]


def test_settled_scrape_gives_up_at_the_deadline():
    n = iter(range(1000))
    s, settled = settled_scrape(lambda: Scrape(drafts=next(n)), timeout_s=0.05, interval_s=0.01)
    assert not settled
