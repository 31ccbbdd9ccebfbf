"""The Qwen3.5-shaped toy's pieces that need no trained model: its cache key, its refusals, the shape rules
of its config, the chained replay, and the MTP head's attention against transformers' own Qwen3.5 layer."""

from __future__ import annotations

import json

import pytest

from specq.pipeline.errors import UsageError
from specq.pipeline.toy import ToyRequest, build_toy_pair, cache_key
from specq.pipeline.toy.acceptance import replay, replay_chain
from specq.pipeline.toy.qwen35 import HYBRID, text_config


def test_cache_key_is_separate_and_leaves_qwen3_unchanged() -> None:
    # The Qwen3 key hashes exactly what it hashed before `arch` existed: a cached pair stays valid.
    import hashlib

    from specq.pipeline.toy import TOY_FORMAT_VERSION

    blob = json.dumps(["small", 0, "abc", TOY_FORMAT_VERSION]).encode()
    assert cache_key("small", 0, "abc") == f"small-s0-{hashlib.sha256(blob).hexdigest()[:16]}"
    key35 = cache_key("small", 0, "abc", "qwen3.5")
    assert key35.startswith("qwen3.5-small-s0-") and key35 != cache_key("small", 0, "abc")
    assert key35 != cache_key("small", 1, "abc", "qwen3.5")


def test_refusals(tmp_path) -> None:
    with pytest.raises(UsageError, match="unknown toy architecture 'llama'"):
        build_toy_pair(ToyRequest(arch="llama", cache_dir=str(tmp_path)))
    with pytest.raises(UsageError, match="size 'small' only"):
        build_toy_pair(ToyRequest(arch="qwen3.5", size="medium", cache_dir=str(tmp_path)))


def test_cli_refuses_bad_arch(cli, tmp_path) -> None:
    code, _, err = cli("toy", "build", str(tmp_path / "out"), "--arch", "qwen4")
    assert code == 2 and "qwen4" in err


def test_text_config_follows_the_reference_rules() -> None:
    c = text_config(HYBRID, 2048, eos_token_id=0, pad_token_id=0)
    lt = c["layer_types"]
    # 3 linear : 1 full, the full layer last in each group of 4 (Qwen3.5-27B: 48 + 16 of 64)
    assert lt == ["linear_attention"] * 3 + ["full_attention"]
    assert c["head_dim"] == 256 and c["attn_output_gate"] is True and c["mtp_num_hidden_layers"] == 1
    rope = c["rope_parameters"]
    assert sum(rope["mrope_section"]) * 2 == c["head_dim"] * rope["partial_rotary_factor"]
    assert c["num_attention_heads"] % c["num_key_value_heads"] == 0
    assert c["linear_num_value_heads"] % c["linear_num_key_heads"] == 0


def test_replay_chain_equals_replay_for_a_depth_independent_drafter() -> None:
    import random

    rng = random.Random(0)
    rows = [[rng.random() < 0.7 for _ in range(60)] for _ in range(4)]
    for k in (1, 3, 6):
        chained = [[row[t : t + k] for t in range(len(row))] for row in rows]
        assert replay_chain(chained, k, 48) == replay(rows, k, 48)


def test_replay_chain_uses_each_depth() -> None:
    # depth 1 always right, depth 2 always wrong: k=2 accepts exactly one token per step
    rows = [[[True, False]] * 20]
    a = replay_chain(rows, 2, 10)
    assert a.per_position == [1.0, 0.0] and a.tokens_per_step == 2.0 and a.steps == 5


@pytest.fixture(scope="module")
def head():
    torch = pytest.importorskip("torch")
    from transformers import Qwen3_5TextConfig

    from specq.pipeline.toy.mtp import MTPHead

    cfg = Qwen3_5TextConfig(**{k: v for k, v in text_config(HYBRID, 256, eos_token_id=0,
                                                                 pad_token_id=0).items()
                               if k != "model_type"})  # fmt: skip
    torch.manual_seed(0)
    mtp = MTPHead(cfg)
    mtp.init_weights(0, std=0.05)
    with torch.no_grad():
        for name, p in mtp.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(0, 0.1)  # non-trivial norms, so a norm convention mismatch would show
    return cfg, mtp.eval()


def test_mtp_names_are_lmdeploys(head) -> None:
    from specq.pipeline.toy.mtp import mtp_tensors

    # Names `Qwen3_5MTPModel.load_weights` (lmdeploy/pytorch/models/qwen3_5_mtp.py, 0.18) maps from the
    # checkpoint: `mtp.` → `model.`, then q/k/v → qkv_proj and gate/up → gate_up_proj.
    want = {
        "mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
        "mtp.norm.weight",
        "mtp.layers.0.input_layernorm.weight", "mtp.layers.0.post_attention_layernorm.weight",
        "mtp.layers.0.self_attn.q_proj.weight", "mtp.layers.0.self_attn.k_proj.weight",
        "mtp.layers.0.self_attn.v_proj.weight", "mtp.layers.0.self_attn.o_proj.weight",
        "mtp.layers.0.self_attn.q_norm.weight", "mtp.layers.0.self_attn.k_norm.weight",
        "mtp.layers.0.mlp.gate_proj.weight", "mtp.layers.0.mlp.up_proj.weight",
        "mtp.layers.0.mlp.down_proj.weight",
    }  # fmt: skip
    tensors = mtp_tensors(head[1])
    assert set(tensors) == want
    h = HYBRID.hidden_size
    assert list(tensors["mtp.fc.weight"].shape) == [h, 2 * h]  # fc over [embedding, hidden]
    assert list(tensors["mtp.layers.0.self_attn.q_proj.weight"].shape) == [
        HYBRID.num_attention_heads * HYBRID.head_dim * 2, h,  # attn_output_gate
    ]  # fmt: skip


def test_mtp_first_step_is_transformers_qwen35_layer(head) -> None:
    import torch

    cfg, mtp = head
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding

    torch.manual_seed(1)
    emb, hid = torch.randn(2, 9, cfg.hidden_size), torch.randn(2, 9, cfg.hidden_size)
    pos = torch.arange(5, 14)[None].expand(2, -1)
    with torch.no_grad():
        ours, _, _ = mtp(emb, hid, pos)
        x = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(emb), mtp.pre_fc_norm_hidden(hid)], -1))
        cos_sin = Qwen3_5TextRotaryEmbedding(cfg)(x, pos[None].expand(3, -1, -1))
        mask = torch.full((9, 9), float("-inf")).triu(1)[None, None]
        ref = mtp.norm(mtp.layer(x, position_embeddings=cos_sin, attention_mask=mask))
    assert torch.allclose(ours, ref, atol=1e-5), (ours - ref).abs().max()


def test_mtp_chain_step_sees_the_cache_and_its_own_chain(head) -> None:
    """A depth-2 and depth-3 chain step for anchor s equals a plain causal pass over slots 0..s followed by
    the chain's inputs: the engine's cache, then the draft steps appended to it."""
    import torch

    cfg, mtp = head
    torch.manual_seed(2)
    n, h = 10, cfg.hidden_size
    emb, hid = torch.randn(1, n, h), torch.randn(1, n, h)
    pos = torch.arange(1, n + 1)[None]
    e2, e3 = torch.randn(1, n, h), torch.randn(1, n, h)
    with torch.no_grad():
        out1, k1, v1 = mtp(emb, hid, pos)
        out2, k2, v2 = mtp.chain_step(e2, out1, pos + 1, (k1, v1), [])
        out3, _, _ = mtp.chain_step(e3, out2, pos + 2, (k1, v1), [(k2, v2)])
        for s in (0, 4, n - 1):
            seq_e = torch.cat([emb[:, : s + 1], e2[:, s : s + 1]], 1)
            seq_h = torch.cat([hid[:, : s + 1], out1[:, s : s + 1]], 1)
            seq_p = torch.cat([pos[:, : s + 1], pos[:, s : s + 1] + 1], 1)
            ref2, _, _ = mtp(seq_e, seq_h, seq_p)
            assert torch.allclose(out2[:, s], ref2[:, -1], atol=1e-5)
            ref3, _, _ = mtp(
                torch.cat([seq_e, e3[:, s : s + 1]], 1),
                torch.cat([seq_h, out2[:, s : s + 1]], 1),
                torch.cat([seq_p, pos[:, s : s + 1] + 2], 1),
            )
            assert torch.allclose(out3[:, s], ref3[:, -1], atol=1e-5)
