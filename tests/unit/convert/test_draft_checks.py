"""Draft/target compatibility in `specq convert`: DFlash fields, plain drafts, dtype alignment, limits."""

from __future__ import annotations

from specq.pipeline.convert import check_readiness


def by_engine(r):
    return {v.engine: v for v in r.verdicts}


def test_dflash_with_awq_target_bf16_drafter_fixable(make_ckpt, make_draft) -> None:
    t, d = make_ckpt("awq"), make_draft("dflash", dtype="bfloat16")
    r = check_readiness(t, d, draft_tokens=5)
    v = by_engine(r)
    assert r.draft.kind == "dflash" and r.draft.method == "dflash"
    assert v["pytorch"].status == "fixable"
    assert v["pytorch"].fixes == [f"specq convert {d} --dtype float16 --out {d.parent / 'draft-fp16'}"]
    assert v["embedded"].status == "refused"
    assert r.max_draft_tokens == 7 and not r.ready
    assert "plain decoding only" in v["turbomind"].reasons[-1]


def test_dflash_fp16_with_awq_ready(make_ckpt, make_draft) -> None:
    r = check_readiness(make_ckpt("awq"), make_draft("dflash", dtype="float16"), draft_tokens=5)
    assert r.ready and r.engine == "lmdeploy/pytorch"


def test_gptq_target_dflash_needs_both_fixes(make_ckpt, make_draft) -> None:
    r = check_readiness(make_ckpt("gptq"), make_draft("dflash"), draft_tokens=4)
    fixes = r.fixes
    assert len(fixes) == 2 and "--to awq" in fixes[0] and "--dtype float16" in fixes[1]
    assert not r.ready


def test_dflash_problems(make_ckpt, make_draft) -> None:
    d = make_draft("dflash", dtype="float16", num_target_layers=4, vocab_size=1000,
                   dflash_config={"block_size": 4, "target_layer_ids": [1]})  # fmt: skip
    r = check_readiness(make_ckpt("awq"), d, draft_tokens=5)
    text = " | ".join(r.draft.problems)
    assert "trained for a 4-layer target" in text
    assert "include the target's last layer (1)" in text  # the drafter rule convert adds
    assert "block_size 4 allows at most 3 draft tokens" in text
    assert "vocabulary sizes differ" in text
    assert by_engine(r)["pytorch"].status == "refused" and not r.ready


def test_plain_draft_embedded_only(make_ckpt, make_draft) -> None:
    r = check_readiness(make_ckpt("hf"), make_draft("model", dtype="float16"), draft_tokens=4)
    v = by_engine(r)
    assert v["pytorch"].status == "refused" and v["embedded"].status == "accepted"
    assert r.ready and r.engine == "embedded" and r.draft.method is None


def test_mtp_target_without_draft(make_ckpt) -> None:
    r = check_readiness(make_ckpt("awq", config={"mtp_num_hidden_layers": 1}))
    assert r.draft is not None and r.draft.method == "qwen3_5_mtp"
    assert r.engine == "lmdeploy/pytorch"


def test_draft_tokens_out_of_range(make_ckpt, make_draft) -> None:
    r = check_readiness(make_ckpt("awq"), make_draft("eagle3", dtype="float16"), draft_tokens=16)
    assert any("must be in 1..15" in p for p in r.draft.problems)
