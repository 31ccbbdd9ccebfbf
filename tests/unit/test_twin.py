"""`specq twin`: a twin's tensors are the model's to the element (against transformers' own models built on
the meta device, the MTP head and DFlash drafter modules specq trains, and plan's weight estimate), the
synthetic tokenizer covers the vocabulary, every config is marked, plan and bench say so, and unknown
architectures are refused in one line. Tiny configs: each build takes seconds on a CPU."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.twin import TwinRequest, build_twin, read_source
from specq.pipeline.twin.spec import target_tensors

FIXTURE_27B = Path(__file__).parent.parent / "fixtures" / "twin" / "qwen3_5-27b-config.json"


def qwen35_config(vocab: int = 1024, mtp: int = 1) -> dict:
    text = dict(
        model_type="qwen3_5_text", vocab_size=vocab, hidden_size=128, intermediate_size=256,
        num_hidden_layers=4, layer_types=["linear_attention"] * 3 + ["full_attention"], num_attention_heads=2,
        num_key_value_heads=1, head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=32,
        linear_value_head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, mtp_num_hidden_layers=mtp,
        max_position_embeddings=512, tie_word_embeddings=False, eos_token_id=vocab - 24,
        pad_token_id=vocab - 24, rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                                                  "partial_rotary_factor": 0.25},
    )  # fmt: skip
    vision = dict(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, temporal_patch_size=2,
        spatial_merge_size=2, out_hidden_size=128, num_position_embeddings=16,
    )  # fmt: skip
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": text,
        "vision_config": vision, "tie_word_embeddings": False, "eos_token_id": vocab - 22,
        "vision_start_token_id": vocab - 16, "vision_end_token_id": vocab - 15, "image_token_id": vocab - 13,
        "video_token_id": vocab - 12,
    }  # fmt: skip


def dense_config(arch: str, **extra) -> dict:
    cfg = {
        "architectures": [arch], "model_type": "qwen3" if arch.startswith("Qwen3") else "llama",
        "vocab_size": 640, "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 512,
        "tie_word_embeddings": False, "eos_token_id": 600, "bos_token_id": 601, "rms_norm_eps": 1e-6,
        "rope_theta": 1e6,
    }  # fmt: skip
    return {**cfg, **extra}


def write(tmp: Path, cfg: dict, name: str = "config.json") -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    p = tmp / name
    p.write_text(json.dumps(cfg))
    return p


def meta_state(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Names and shapes of transformers' own model for `cfg`, built on the meta device (no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen3_5ForConditionalGeneration

    config = AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "architectures"})
    with torch.device("meta"):
        if cfg["architectures"][0] == "Qwen3_5ForConditionalGeneration":
            model = Qwen3_5ForConditionalGeneration(config)
        else:
            model = AutoModelForCausalLM.from_config(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def spec_state(cfg_path: Path, quant: str = "bf16", prefix: str = "") -> dict[str, tuple[int, ...]]:
    specs = target_tensors(read_source(cfg_path), quant)  # type: ignore[arg-type]
    return {t.name: t.shape for t in specs if t.name.startswith(prefix)}


@pytest.mark.parametrize(
    "cfg",
    [
        dense_config("Qwen3ForCausalLM"),
        dense_config("Qwen3ForCausalLM", tie_word_embeddings=True, attention_bias=True),
        dense_config("LlamaForCausalLM"),
        dense_config("LlamaForCausalLM", attention_bias=True, mlp_bias=True),
        qwen35_config(),
    ],
    ids=["qwen3", "qwen3-tied-bias", "llama", "llama-bias", "qwen3.5"],
)
def test_bf16_twin_has_transformers_own_tensors(tmp_path, cfg):
    path = write(tmp_path, cfg)
    ours = {k: v for k, v in spec_state(path).items() if not k.startswith("mtp.")}
    theirs = meta_state(cfg)
    if cfg.get("tie_word_embeddings"):
        theirs.pop("lm_head.weight", None)  # tied: saved once, as the embedding
    assert ours == theirs
    n = sum(_numel(s) for s in ours.values())
    assert n == sum(_numel(s) for s in theirs.values())


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_qwen35_mtp_layer_is_the_mtp_head_specq_trains(tmp_path):
    import torch
    from transformers import Qwen3_5Config

    from specq.pipeline.toy.mtp import MTPHead

    cfg = qwen35_config()
    ours = spec_state(write(tmp_path, cfg), prefix="mtp.")
    with torch.device("meta"):
        head = MTPHead(Qwen3_5Config(text_config=cfg["text_config"]).text_config)
    assert ours == {f"mtp.{k}": tuple(v.shape) for k, v in head.state_dict().items()}


def test_dense_layer_types_other_than_full_attention_are_refused(tmp_path, cli):
    cfg = dense_config("Qwen3ForCausalLM", layer_types=["sliding_attention"] * 4)
    code, _, err = cli("twin", str(write(tmp_path, cfg)), "--out", str(tmp_path / "o"), "--device", "cpu")
    assert code == 2 and "sliding_attention" in err and len(err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def qwen35_twin(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("twin35")
    src = write(root / "src", qwen35_config())
    build_twin(
        TwinRequest(
            config=str(src),
            out=str(root / "awq"),
            quant="awq",
            drafters=("mtp", "dflash", "eagle3"),
            draft_layers=2,
            device="cpu",
            shard_bytes=400_000,
        )  # fmt: skip
    )
    return root


def test_awq_twin_files_hold_the_spec_and_load_rules(qwen35_twin):
    from specq.pipeline.engines import qwen35
    from specq.pipeline.engines.layout import quantized_linears

    target = Checkpoint(qwen35_twin / "awq" / "target")
    spec = spec_state(qwen35_twin / "src" / "config.json", "awq")
    assert len(target.weight_files) > 1  # sharded, with an index naming every tensor
    assert {k: tuple(v.shape) for k, v in target.tensors.items()} == spec
    q = target.quantization
    assert q is not None and (q.method, q.bits, q.group_size, q.version) == ("awq", 4, 128, "gemm")
    linears = quantized_linears(target, q)
    assert linears and all(not lin.problems for lin in linears)
    assert {lin.format for lin in linears} == {"awq"}
    assert not any(".visual." in f".{lin.prefix}" or lin.prefix.startswith("mtp.") for lin in linears)
    rules = {f.rule: f.passed for f in qwen35.pytorch_findings(target) + qwen35.mtp_findings(target)}
    assert rules["qwen3_5.linear_attn_projections_quantized"]
    assert rules["qwen3_5.linear_attn_gates_unquantized"]
    assert rules["qwen3_5.vision_unquantized"]
    assert rules["qwen3_5.mtp_weights_present"]
    assert rules["qwen3_5.mtp_projections_stored_as_built"]
    assert rules["qwen3_5.mtp_fc_unquantized"]
    # the unquantized rest is bf16, the AWQ scales fp16
    dtypes = {t.dtype for n, t in target.tensors.items() if n.endswith(".weight")}
    assert dtypes == {"BF16"}
    assert {t.dtype for n, t in target.tensors.items() if n.endswith(".scales")} == {"F16"}


def test_awq_twin_bytes_equal_plans_config_only_estimate(qwen35_twin):
    """plan's config-only estimate (pipeline/plan/shapes.py) and the twin agree to the byte: the quantized
    and dense decoder, the embeddings, the head, the vision tower and the MTP layer kept unquantized by
    `modules_to_not_convert` (LMDeploy's fused names: `mtp.layers.0.self_attn.qkv_proj` covers q/k/v)."""
    from specq.pipeline.plan.shapes import estimate_weights, shape_from_config

    target = Checkpoint(qwen35_twin / "awq" / "target")
    est = estimate_weights(shape_from_config(target.config), target.quantization, 2, include_mtp=True)
    t = target.tensors
    quantized = sum(v.nbytes for n, v in t.items() if n.endswith((".qweight", ".qzeros", ".scales")))
    assert quantized == est.quantized
    assert sum(v.nbytes for n, v in t.items() if n.startswith("mtp.")) == est.mtp
    assert sum(v.nbytes for n, v in t.items() if n.startswith("model.visual.")) == est.vision
    assert target.weight_bytes == est.total


def test_27b_awq_twin_bytes_equal_plans_config_only_estimate():
    """The same for the 27B fixture, from the spec (19.5 GB: nothing is built)."""
    from specq.pipeline.checkpoint import QuantInfo
    from specq.pipeline.plan.shapes import estimate_weights, shape_from_config
    from specq.pipeline.twin.spec import quantization_config

    src = read_source(FIXTURE_27B)
    q = QuantInfo(method="awq", bits=4, group_size=128, raw=quantization_config(src))
    est = estimate_weights(shape_from_config(src.config), q, 2, include_mtp=True)
    assert est.total == sum(t.nbytes for t in target_tensors(src, "awq")) == 19_547_547_104


def test_twin_drafters_have_the_target_shape(qwen35_twin):
    from transformers import Qwen3_5Config

    from specq.pipeline.draft.contract import check_drafter, expected_tensors
    from specq.pipeline.draft.model import DFlashDrafter, DrafterShape

    target = Checkpoint(qwen35_twin / "awq" / "target")
    dflash = Checkpoint(qwen35_twin / "awq" / "dflash")
    assert check_drafter(dflash, target, draft_tokens=15) == []
    # beside an AWQ Qwen3.5 (run in bf16 through specq's LMDeploy patch) the drafters are bf16, as `specq
    # draft train` exports; beside any other AWQ target they are fp16 (spec.drafter_dtype)
    assert dflash.config["torch_dtype"] == "bfloat16" and {t.dtype for t in dflash.tensors.values()} == {
        "BF16"
    }
    from specq.pipeline.twin.spec import drafter_dtype

    assert (drafter_dtype("awq"), drafter_dtype("awq", True), drafter_dtype("bf16")) == (
        "F16",
        "BF16",
        "BF16",
    )
    assert set(dflash.tensors) == set(expected_tensors(dflash.config))
    c = dflash.config
    shape = DrafterShape(
        hidden_size=c["hidden_size"], num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"], num_key_value_heads=c["num_key_value_heads"],
        head_dim=c["head_dim"], intermediate_size=c["intermediate_size"], rms_norm_eps=c["rms_norm_eps"],
        rope_theta=c["rope_theta"], num_context_features=len(c["dflash_config"]["target_layer_ids"]),
        target_hidden_size=c["target_hidden_size"],
    )  # fmt: skip
    import torch

    with torch.device("meta"):
        module = DFlashDrafter(shape)
    assert {k: tuple(v.shape) for k, v in module.state_dict().items()} == {
        k: tuple(v.shape) for k, v in dflash.tensors.items()
    }
    assert (
        c["num_hidden_layers"] == 2
        and c["hidden_size"]
        == Qwen3_5Config(text_config=target.config["text_config"]).text_config.hidden_size
    )
    eagle = Checkpoint(qwen35_twin / "awq" / "eagle3")
    assert eagle.draft_kind == "eagle3"
    h = eagle.config["hidden_size"]
    assert eagle.config["target_hidden_size"] == target.text_config["hidden_size"] == h
    assert tuple(eagle.tensors["fc.weight"].shape) == (h, 3 * h)
    assert tuple(eagle.tensors["midlayer.self_attn.q_proj.weight"].shape)[1] == 2 * h
    assert eagle.tensors["t2d"].shape == [target.text_config["vocab_size"]]


def test_twin_tokenizer_covers_the_vocabulary_with_the_configs_special_ids(qwen35_twin):
    from transformers import AutoTokenizer

    cfg = qwen35_config()
    tok = AutoTokenizer.from_pretrained(qwen35_twin / "awq" / "target")
    assert len(tok) == cfg["text_config"]["vocab_size"]
    eos = cfg["text_config"]["eos_token_id"]
    assert tok.eos_token_id == eos and tok.convert_ids_to_tokens(eos) == "<|endoftext|>"
    assert tok.convert_ids_to_tokens(cfg["eos_token_id"]) == "<|im_end|>"
    assert tok.convert_ids_to_tokens(cfg["image_token_id"]) == "<|image_pad|>"
    text = "def f(x):\n    return x ☃"
    assert tok.decode(tok(text)["input_ids"]) == text
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert chat.startswith("<|im_start|>user\nhi<|im_end|>")


def test_real_size_tokenizer_of_the_27b(tmp_path):
    """Qwen3.5's 248,320 ids, every one a token (the embeddings and LM head are the real size)."""
    from specq.pipeline.twin.tokenizer import build_tokenizer

    cfg = json.loads(FIXTURE_27B.read_text())
    tok = build_tokenizer(cfg, cfg["text_config"]["vocab_size"])
    assert len(tok) == 248_320
    assert tok.convert_ids_to_tokens([248044, 248045, 248046, 248053, 248056]) == [
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>",
    ]  # fmt: skip
    assert len(set(tok.convert_ids_to_tokens(list(range(248_320))))) == 248_320


def test_every_config_is_marked_and_plan_says_twin(qwen35_twin, cli):
    src = qwen35_twin / "src" / "config.json"
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    for part in ("target", "dflash", "eagle3"):
        marker = json.loads((qwen35_twin / "awq" / part / "config.json").read_text())["specq_twin"]
        assert marker["source_sha256"] == sha and marker["created"].startswith("20")
        for f in Checkpoint(qwen35_twin / "awq" / part).weight_files:  # the weight files say so too
            assert sha in _safetensors_metadata(f)["specq_twin"]
    index = json.loads((qwen35_twin / "awq" / "target" / "model.safetensors.index.json").read_text())
    assert sha in index["metadata"]["specq_twin"]
    report = json.loads((qwen35_twin / "awq" / "twin_report.json").read_text())
    assert report["kind"] == "specq-twin" and report["marker"]["source_sha256"] == sha
    target, dflash = qwen35_twin / "awq" / "target", qwen35_twin / "awq" / "dflash"
    code, out, _ = cli("plan", str(target), "--draft-model", str(dflash), "--gpu-memory", "24GiB", "--json")
    assert code == 0
    plan = json.loads(out)
    assert set(plan["twin"]) == {"target", "drafter"} and plan["twin"]["target"]["source_sha256"] == sha
    code, text, _ = cli("plan", str(target), "--gpu-memory", "24GiB")
    assert code == 0 and f"TWIN: the target {target} is a scale twin" in text


def _safetensors_metadata(path: Path) -> dict:
    import struct

    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))["__metadata__"]


def test_bench_report_names_a_twin(qwen35_twin, tmp_path):
    from specq.pipeline.bench.request import BenchRequest
    from specq.pipeline.bench.runner import mark_twins
    from specq.pipeline.config.loader import resolve_config
    from specq.pipeline.report.formatters import to_markdown
    from specq.pipeline.report.models import BenchReport, HostInfo, WorkloadInfo

    target = qwen35_twin / "awq" / "target"
    cfg = resolve_config(flags={"model": {"model_path": str(target)}}, environ={})
    request = BenchRequest.from_config(cfg)
    report = BenchReport(
        created_at="2026-12-02T00:00:00Z", specq_version="0", host=HostInfo(platform="x", python="3"),
        workload=WorkloadInfo(source="s", digest="d", requests=1, categories={}, mode="chat", max_tokens=8,
                              temperature=0.0),
    )  # fmt: skip
    mark_twins(report, request)
    assert list(report.twin) == ["target"]
    assert any(n.startswith(f"TWIN: the target {target}") for n in report.notes)
    assert "TWIN:" in to_markdown(report)
    plain = tmp_path / "plain"
    write(plain, dense_config("Qwen3ForCausalLM"))
    report2 = report.model_copy(update={"twin": {}, "notes": []})
    plain_cfg = resolve_config(flags={"model": {"model_path": str(plain)}}, environ={})
    mark_twins(report2, BenchRequest.from_config(plain_cfg))
    assert report2.twin == {} and report2.notes == []


def test_unknown_architecture_refused_in_one_line(tmp_path, cli):
    cfg = dense_config("MistralForCausalLM")
    code, out, err = cli("twin", str(write(tmp_path, cfg)), "--out", str(tmp_path / "o"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "MistralForCausalLM" in err and "Qwen3_5ForConditionalGeneration" in err
    assert not (tmp_path / "o").exists()


def test_mtp_drafter_needs_an_mtp_layer_and_a_twin_is_not_a_source(tmp_path, cli):
    path = write(tmp_path / "d", dense_config("Qwen3ForCausalLM"))
    code, _, err = cli("twin", str(path), "--out", str(tmp_path / "o"), "--drafter", "mtp")
    assert code == 2 and "MTP" in err and not (tmp_path / "o").exists()
    code, out, _ = cli("twin", str(path.parent), "--out", str(tmp_path / "t"), "--device", "cpu", "--json")
    assert code == 0 and json.loads(out)["target"]["params"] > 0
    code, _, err = cli("twin", str(tmp_path / "t" / "target"), "--out", str(tmp_path / "t2"))
    assert code == 2 and "itself a scale twin" in err
    code, _, err = cli("twin", str(path.parent), "--out", str(tmp_path / "t"), "--device", "cpu")
    assert code == 2 and "already exists" in err


def test_27b_fixture_is_the_reference_models_size():
    """The Qwen3.5-27B fixture's twin: about 27 B parameters (the model's name), the MTP layer on top, and
    an AWQ target near the size of the public 4-bit checkpoints; computed from the spec, nothing built."""
    src = read_source(FIXTURE_27B)
    bf16 = target_tensors(src, "bf16")
    params = sum(t.numel for t in bf16)
    assert 26.5e9 < params < 28.5e9
    # the published bf16 checkpoint: 51.75 GiB of safetensors (docs/plan.md's reference case)
    assert round(sum(t.nbytes for t in bf16) / 2**30, 2) == 51.75
    awq = target_tensors(src, "awq")
    awq_bytes = sum(t.nbytes for t in awq)
    assert 15e9 < awq_bytes < 22e9
    # per 4 layers: 3 Gated DeltaNet (qkv, z, out + 3 MLP) and 1 full attention (q, k, v, o + 3 MLP)
    assert sum(1 for t in awq if t.name.endswith(".qweight")) == 16 * (3 * (3 + 3) + 4 + 3)


def test_draft_eval_predicts_with_the_curve_at_the_targets_size(qwen35_twin):
    """`draft eval`'s offline speedup uses the measured step-cost curve at the target's weight bytes."""
    from specq.pipeline.draft.eval import summarize
    from specq.pipeline.report.text import draft_eval_text
    from specq.pipeline.speedup import STEP_COST_CURVE

    target = qwen35_twin / "awq" / "target"
    report = summarize(
        [0.8, 0.6, 0.4], target=str(target), draft=str(qwen35_twin / "awq" / "dflash"), block_size=4,
        prompts=1, anchors=10, seconds=0.0,
    )  # fmt: skip
    assert report.step_cost == STEP_COST_CURVE.at(Checkpoint(target).weight_bytes)
    assert "step-cost curve" in report.step_cost_basis and "NVIDIA H200" in report.step_cost_basis
    assert report.step_cost_basis in draft_eval_text(report)


@pytest.mark.parametrize("arch", ["Qwen3ForCausalLM", "LlamaForCausalLM", "Qwen3_5ForConditionalGeneration"])
def test_a_bf16_twin_loads_in_transformers_and_generates(tmp_path, arch):
    """The twin is a checkpoint transformers loads with no missing or unexpected weight (the MTP layer is
    the one Qwen3.5 extra transformers does not build), and its tokenizer round-trips what it generates."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3_5ForConditionalGeneration

    cfg = qwen35_config() if arch.startswith("Qwen3_5") else dense_config(arch)
    build_twin(TwinRequest(config=str(write(tmp_path / "src", cfg)), out=str(tmp_path / "t"), device="cpu"))
    path = tmp_path / "t" / "target"
    cls = Qwen3_5ForConditionalGeneration if arch.startswith("Qwen3_5") else AutoModelForCausalLM
    model, info = cls.from_pretrained(path, dtype=torch.bfloat16, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert all(k.startswith("mtp.") for k in info["unexpected_keys"])
    tok = AutoTokenizer.from_pretrained(path)
    ids = tok("def f(x):", return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 4
    assert isinstance(tok.decode(out[0]), str)
    assert all(torch.isfinite(p).all() for p in model.parameters())
