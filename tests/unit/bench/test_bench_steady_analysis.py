"""The pieces behind a trustworthy headline, on hand-made records: the client/server self-consistency
check, median and spread over trials, the speedup range, the step cost, the note on the edge of the k range,
and the default k values for a DFlash drafter (from a real drafter config.json on disk)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.bench import BenchRequest
from specq.pipeline.bench.analysis import (
    client_decode_rate,
    consistency,
    edge_note,
    repetition_flag,
    speedup_range,
    spread,
    step_cost,
    warmup_settled,
)
from specq.pipeline.bench.metrics import Scrape, server_check
from specq.pipeline.bench.runner import default_draft_tokens, dflash_block_size, draft_token_values
from specq.pipeline.config.models import SpecqConfig
from specq.pipeline.report.models import Acceptance, Consistency, RequestRecord, Run, ServerCheck, Trial


def rec(ttft: float, e2e: float, tokens: int = 20) -> RequestRecord:
    return RequestRecord(id="p", category="code", ttft_s=ttft, e2e_s=e2e, output_tokens=tokens)


def test_consistency_agrees_on_a_clean_run_and_flags_a_paid_compile():
    # 4 requests, back to back: the first token at 10 ms, the other 19 in 0.2 s of decode (95 tok/s); the
    # server's counters over the same requests (its decode rate leaves each request's first token out too)
    clean = [rec(0.01, 0.21) for _ in range(4)]
    server = server_check(Scrape(generation_tokens=0, decode_time_sum=0, decode_time_count=0),
                          Scrape(generation_tokens=80, decode_time_sum=0.8, decode_time_count=4))  # fmt: skip
    assert server is not None and server.server_decode_tokens_per_s == pytest.approx(95.0)
    assert client_decode_rate(clean) == pytest.approx(95.0)
    c = consistency(clean, 0.84, server, 0.10)
    assert c is not None and c.consistent is True and c.problems == []
    assert c.decode_rel_diff == pytest.approx(0.0) and c.output_rel_diff == pytest.approx(0.0)
    # one request paid a 0.5 s compile before its first token: decode rates still agree, the output rate
    # does not (the run's median TTFT is still 10 ms)
    dirty = [rec(0.51, 0.71)] + clean[1:]
    c = consistency(dirty, 1.34, server, 0.10)
    assert c is not None and c.consistent is False and abs(c.decode_rel_diff or 0) < 1e-9
    assert c.output_rel_diff == pytest.approx(0.84 / 1.34 - 1)
    assert c.problems == ["client output rate 37% below the rate the server's decode rate implies"]
    # fewer tokens than the server generated: flagged too
    c = consistency(clean, 0.84, server.model_copy(update={"generation_tokens": 100.0}), 0.10)
    assert c is not None and "client output tokens 20% below" in c.problems[0]
    assert consistency(clean, 0.84, None, 0.10) is None


def test_spread_speedup_range_and_step_cost():
    s = spread([90.0, 100.0, 110.0], [100.0, 110.0])
    assert (s.n, s.used, s.median, s.min, s.max) == (3, 2, 105.0, 100.0, 110.0)
    assert s.rel_spread == pytest.approx(10 / 105)
    base = Run(label="baseline", draft_tokens=0, concurrency=1, baseline=True,
               trials=[Trial(index=0, output_tokens_per_s=100.0), Trial(index=1, output_tokens_per_s=110.0)],
               server=ServerCheck(server_decode_tokens_per_s=120.0))  # fmt: skip
    run = Run(label="k=4", draft_tokens=4, concurrency=1,
              trials=[Trial(index=0, output_tokens_per_s=200.0), Trial(index=1, output_tokens_per_s=999.0,
                      steady=False), Trial(index=2, output_tokens_per_s=240.0)],
              server=ServerCheck(server_decode_tokens_per_s=300.0),
              acceptance=Acceptance(source="lmdeploy:", drafts=1, draft_tokens=4, accepted_tokens=4,
                                    acceptance_length=5.0))  # fmt: skip
    low, high = speedup_range(base, run)  # the unsteady trial (999) is left out
    assert low == pytest.approx(200 / 110) and high == pytest.approx(240 / 100)
    step_cost(base, run)
    assert run.step_cost_source == "server" and run.decode_speedup == pytest.approx(2.5)
    assert run.step_cost_ratio == pytest.approx(5.0 / 2.5)


def test_step_cost_takes_the_server_rate_on_the_headline_basis():
    # the headline is a median over trials; the server's figure must be too, or trial-to-trial noise (the
    # H200's k = 15 trials: 1291, 1813, 1357 tok/s by the server) reads as client-server disagreement
    def trial(i: int, server: float, steady: bool = True) -> Trial:
        return Trial(
            index=i, steady=steady, consistency=Consistency(tolerance=0.1, server_decode_tokens_per_s=server)
        )

    base = Run(label="baseline", draft_tokens=0, concurrency=1, baseline=True,
               trials=[trial(0, 383.0), trial(1, 332.0), trial(2, 322.0)],
               server=ServerCheck(server_decode_tokens_per_s=343.4))  # fmt: skip
    run = Run(label="k=15", draft_tokens=15, concurrency=1,
              trials=[trial(0, 1290.7), trial(1, 1813.2), trial(2, 1356.6), trial(3, 9999.0, steady=False)],
              server=ServerCheck(server_decode_tokens_per_s=1453.9),
              acceptance=Acceptance(source="lmdeploy:", drafts=1, draft_tokens=15, accepted_tokens=11,
                                    acceptance_length=12.13))  # fmt: skip
    step_cost(base, run)
    assert run.step_cost_source == "server"
    assert run.decode_speedup == pytest.approx(
        1356.6 / 332.0
    )  # medians of the steady trials, not 1453.9 / 343.4
    assert run.step_cost_ratio == pytest.approx(12.13 / (1356.6 / 332.0))


def test_warmup_settles_when_the_rate_stops_rising():
    # output tok/s of the H200's warm-up passes (2026-12-01, small AWQ toy, k = 5 and k = 15): the first pass
    # pays the compiles; after it, passes vary 10-20 % with no trend
    assert not warmup_settled([656.3], 0.05)
    assert not warmup_settled([656.3, 768.4], 0.05)  # still 17 % faster: maybe still compiling
    assert warmup_settled([656.3, 768.4, 672.3], 0.05)  # slower than the last: noise, not warm-up
    assert not warmup_settled([759.6, 1038.6, 1172.3, 1350.4], 0.05)
    assert warmup_settled([759.6, 1038.6, 1172.3, 1350.4, 1097.2], 0.05)
    assert warmup_settled([100.0, 104.0], 0.05) and not warmup_settled([100.0, 106.0], 0.05)


def test_edge_note_names_the_edge_and_the_limit():
    best, note = edge_note({3: 1.5, 4: 1.7, 5: 1.9, 6: 2.1}, 15)
    assert best == 6 and note is not None and "largest measured" in note and "up to 15" in note
    assert edge_note({3: 1.5, 4: 1.7, 5: 1.9, 6: 2.1}, 6) == (6, None)  # nothing larger is allowed
    best, note = edge_note({3: 2.0, 4: 1.7, 5: 1.5}, 7)
    assert best == 3 and note is not None and "smallest measured" in note
    assert edge_note({3: 1.5, 4: 1.9, 5: 1.7}, 7) == (4, None)


def test_default_k_values_reach_a_dflash_drafters_block_size(tmp_path):
    assert default_draft_tokens(None) == [3, 4, 5, 6]
    assert default_draft_tokens(8) == [3, 4, 5, 6, 7]
    assert default_draft_tokens(16) == [3, 4, 5, 6, 7, 11, 15]
    assert default_draft_tokens(4) == [3]
    draft = tmp_path / "drafter"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({
        "architectures": ["DFlashDraftModel"],
        "dflash_config": {"block_size": 16, "mask_token_id": 5, "target_layer_ids": [1, 2]},
    }))  # fmt: skip
    cfg = SpecqConfig()
    cfg.model.draft_model_path = str(draft)
    assert dflash_block_size(BenchRequest.from_config(cfg)) == 16 and draft_token_values(
        BenchRequest.from_config(cfg)
    ) == [3, 4, 5, 6, 7, 11, 15]
    cfg.bench.draft_tokens = [3, 4, 5, 6]  # --draft-tokens 3..6 is kept as asked
    assert draft_token_values(BenchRequest.from_config(cfg)) == [3, 4, 5, 6]
    cfg.bench.draft_tokens = None
    cfg.speculative.method = "eagle3"  # another method keeps today's default
    assert dflash_block_size(BenchRequest.from_config(cfg)) is None and draft_token_values(
        BenchRequest.from_config(cfg)
    ) == [3, 4, 5, 6]


def test_a_looping_baseline_gets_the_repetitive_flag_and_failed_requests_do_not_count():
    loop = "#\n" * 64  # what the Qwen3.5 toy answered every code prompt with on the H200
    looping = [RequestRecord(id=str(i), category="code", output_text=loop) for i in range(3)]
    flag = repetition_flag(looping)
    assert flag is not None and flag.startswith(
        "repetitive: the outputs loop (median distinct 8-gram fraction 0.02"
    )
    assert "overstate what real text gets" in flag
    real = Path(__file__).read_text()[:600]
    assert repetition_flag([RequestRecord(id="r", category="code", output_text=real)]) is None
    failed = [RequestRecord(id="x", category="code", ok=False, output_text=loop)]
    assert repetition_flag(failed) is None
