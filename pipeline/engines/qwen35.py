"""LMDeploy 0.18's load rules for Qwen3.5 (`Qwen3_5ForConditionalGeneration`: Gated DeltaNet linear attention
interleaved with gated full attention, a vision tower, a built-in MTP head), read from its source
(InternLM/lmdeploy 0.18.0, paths below relative to `lmdeploy/`) and checked on a checkpoint's safetensors
headers. Each rule is a `Finding` with a stable id, the source it comes from and what LMDeploy does when the
rule is broken, so `specq convert --json` can be proved on a GPU ("accepted loads, refused fails as
predicted").

PyTorch engine (`pytorch/models/qwen3_5.py`, `qwen3_5_mtp.py`, `pytorch/config.py`, `pytorch/nn/linear`):
- The Gated DeltaNet's `in_proj_qkv`, `in_proj_z` and `out_proj` are built with the checkpoint's quant config
  and *no module prefix*. AWQ therefore always makes them `AwqLinear` (`QuantizationConfig.get_quant_method`
  consults `modules_to_not_convert` only for a non-empty prefix): stored unquantized they fail to load
  (`KeyError: '...in_proj_qkv.weight'`). compressed-tensors refuses the empty prefix outright
  (`ValueError: compressed-tensors dispatch requires a non-empty canonical module prefix`).
- `in_proj_b` and `in_proj_a` are fused into `in_proj_ba` (`build_merged_colwise_linear` without a quant
  config): they must stay unquantized (`KeyError: '...in_proj_ba.qweight'`). `conv1d`, `A_log`, `dt_bias` and
  the gated norm are plain parameters.
- Full attention fuses q (with the output gate: 2 x heads x head_dim), k, v into `qkv_proj` and the MLP fuses
  gate/up into `gate_up_proj`: the fused-AWQ alignment rule of `pytorch.py` applies to both (with head dim 256
  any head count is aligned at group 128).
- The vision tower gets no quant config (only `text_config` receives `quantization_config`,
  `pytorch/configurations/qwen3_5.py`): its linears must stay unquantized.
- MTP (`--speculative-algorithm qwen3_5_mtp`): the head is read from the target's `mtp.*` tensors; missing
  ones are not reported by LMDeploy's loader (`weight_loader/model_weight_loader.py` has no missing-weight
  check), the head then runs uninitialised. Its attention and MLP are built like the target's (quantized as
  the checkpoint says, with prefixes `mtp.layers.N.self_attn.qkv_proj` etc.), `mtp.fc` never quantized.

- Dtype (seen on the H200, 2026-12-01): `pytorch/configurations/qwen3_5.py` allocates the Gated DeltaNet's
  conv and recurrent states in bf16 on every GPU with bf16 (sm80+, so every GPU FA3 runs on), whatever the
  model runs in, while `_update_torch_dtype` runs AWQ in fp16 always and a float32/float16 checkpoint in fp16
  under `--dtype auto`. The first prefill then dies in `backends/cuda/causal_conv1d.py` (`RuntimeError:
  index_copy_(): self and source expected to have the same dtype, but got (self) BFloat16 and (source) Half`;
  with speculation `Index put requires the source and destination dtypes match, got BFloat16 …`). So a
  Qwen3.5 target runs on the PyTorch engine in bf16 only: specq launches every one with `--dtype bfloat16`
  (`serve_dtype`). For AWQ that takes specq's compatibility patch for LMDeploy 0.18.0
  (`engines/lmdeploy_compat`: AWQ honours `--dtype bfloat16`, the W4A16 GEMM runs in fp16 inside); with any
  other installed LMDeploy a quantized Qwen3.5 is refused (`state_dtype_finding`).

TurboMind (`turbomind/supported_models.py` lists Qwen3_5ForConditionalGeneration; `turbomind/models/
qwen3_5.py` builds every linear through its format resolver, so quantized and unquantized projections both
load): the vision tower's head dim (hidden_size / num_heads) must be 64 or 72 (`_VIT_HEAD_DIM_PADDED`, else
`NotImplementedError: Qwen3.5 ViT head_dim=... not supported`) unless the engine runs language-model-only."""

from __future__ import annotations

from ..checkpoint import Checkpoint
from .verdict import Finding

ARCHITECTURES = ("Qwen3_5ForConditionalGeneration",)
SRC_MODEL = "lmdeploy/pytorch/models/qwen3_5.py"
SRC_MTP = "lmdeploy/pytorch/models/qwen3_5_mtp.py"
SRC_CONFIG = "lmdeploy/pytorch/config.py"
SRC_TM = "lmdeploy/turbomind/models/qwen3_5.py"
GDN_QUANTIZED = ("in_proj_qkv", "in_proj_z", "out_proj")  # built with the quant config, no prefix
GDN_UNQUANTIZED = ("in_proj_a", "in_proj_b")  # fused into in_proj_ba without a quant config
MTP_PROJECTIONS = {  # checkpoint name -> LMDeploy's module (the prefix its quant dispatch sees)
    "self_attn.q_proj": "self_attn.qkv_proj",
    "self_attn.k_proj": "self_attn.qkv_proj",
    "self_attn.v_proj": "self_attn.qkv_proj",
    "self_attn.o_proj": "self_attn.o_proj",
    "mlp.gate_proj": "mlp.gate_up_proj",
    "mlp.up_proj": "mlp.gate_up_proj",
    "mlp.down_proj": "mlp.down_proj",
}
TM_VIT_HEAD_DIMS = (64, 72)
_QUANT_SUFFIXES = ("qweight", "weight_packed")


STATE_DTYPE = "bfloat16"  # LMDeploy 0.18's Gated DeltaNet state dtype on sm80+ GPUs
STATE_DTYPE_ERROR = (
    "RuntimeError: index_copy_(): self and source expected to have the same dtype, but got (self) BFloat16 "
    "and (source) Half"
)


def is_qwen35(ckpt: Checkpoint) -> bool:
    return bool(ckpt.architectures) and ckpt.architectures[0] in ARCHITECTURES


def has_gated_delta(ckpt: Checkpoint) -> bool:
    """Gated DeltaNet (`linear_attention`) layers: Qwen3.5, Qwen3.5-MoE, Qwen3-Next. LMDeploy 0.18 keeps
    their state in bf16 for all of them (`configurations/qwen3_5.py`, `qwen3_next.py`)."""
    types = ckpt.text_config.get("layer_types")  # not speculation.recurrent_layer_types: that module
    return isinstance(types, list) and "linear_attention" in types  # imports this one (no cycles)


def serve_dtype(ckpt: Checkpoint) -> str | None:
    """The `--dtype` specq launches LMDeploy's PyTorch engine with for `ckpt` when the user leaves it at
    'auto': bf16 for a Gated DeltaNet target (its state is bf16 whatever the model runs in), quantized or
    not (AWQ through the compatibility patch, `needs_compat`), None (LMDeploy's own 'auto') for everything
    else."""
    return STATE_DTYPE if has_gated_delta(ckpt) else None


def needs_compat(ckpt: Checkpoint) -> bool:
    """A quantized Gated DeltaNet target: LMDeploy 0.18.0's PyTorch engine serves it only with specq's
    compatibility patch (`engines/lmdeploy_compat`), which lets AWQ run in bf16."""
    return has_gated_delta(ckpt) and ckpt.quantization is not None


def state_dtype_finding(ckpt: Checkpoint) -> Finding:
    """AWQ (fp16 in stock LMDeploy 0.18) against the bf16 Gated DeltaNet state: accepted when specq's
    compatibility patch applies to the LMDeploy installed here (or none is installed: `serve` checks it
    again before a launch), refused for an LMDeploy the patch does not know."""
    from . import lmdeploy_compat

    compat = lmdeploy_compat.status()
    why = lmdeploy_compat.refusal(compat, f"{ckpt.name} (quantized, Gated DeltaNet)")
    source = (
        "lmdeploy/pytorch/configurations/qwen3_5.py (states_shapes: bf16 on sm80+); "
        f"{SRC_CONFIG} _update_torch_dtype (AWQ -> float16); engines/lmdeploy_compat"
    )
    if why is None:
        where = "" if compat.state == "absent" else f" ({compat.summary()})"
        return Finding(
            rule="qwen3_5.state_dtype",
            passed=True,
            source=source,
            detail="runs in bf16 (--dtype bfloat16) with specq's LMDeploy "
            f"{lmdeploy_compat.SUPPORTED_VERSION} compatibility patch{where}",
        )
    return Finding(
        rule="qwen3_5.state_dtype",
        passed=False,
        source=source,
        detail=why + "; or serve the bf16 checkpoint, or the AWQ one on TurboMind without speculation",
        expect=STATE_DTYPE_ERROR,
    )


def linear_storage(ckpt: Checkpoint) -> tuple[set[str], set[str]]:
    """(quantized, unquantized) linear prefixes: one with `qweight`/`weight_packed` is quantized, one with a
    2-D `weight` is not."""
    quantized, plain = set(), set()
    for name, t in ckpt.tensors.items():
        prefix, _, suffix = name.rpartition(".")
        if suffix in _QUANT_SUFFIXES:
            quantized.add(prefix)
        elif suffix == "weight" and len(t.shape) == 2:
            plain.add(prefix)
    return quantized, plain


def _name(prefixes: set[str], n: int = 2) -> str:
    names = sorted(prefixes)
    more = f" and {len(names) - n} more" if len(names) > n else ""
    return ", ".join(names[:n]) + more


def _lmdeploy_ignores(ckpt: Checkpoint, module: str) -> bool:
    """LMDeploy 0.18 `QuantizationConfig.get_quant_method`: a module is left unquantized when its prefix is a
    substring of an entry of `modules_to_not_convert` (or `ignored_layers`)."""
    q = ckpt.quantization
    raw = q.raw if q else {}
    ignored = [str(x) for x in (raw.get("ignored_layers") or raw.get("modules_to_not_convert") or [])]
    return any(module in entry for entry in ignored)


def pytorch_findings(ckpt: Checkpoint) -> list[Finding]:
    """The PyTorch engine's Qwen3.5 rules on a quantized checkpoint, and the state-dtype rule on any quantized
    Gated DeltaNet model (empty for other models / unquantized)."""
    q = ckpt.quantization
    if q is None:
        return []
    # AWQ runs in fp16 in stock LMDeploy (GPTQ only repacked to AWQ); compressed-tensors in the config's dtype
    dtype_rule = [state_dtype_finding(ckpt)] if has_gated_delta(ckpt) and q.method in ("awq", "gptq") else []
    if not is_qwen35(ckpt):
        return dtype_rule
    if q.method == "compressed-tensors":
        return [
            Finding(
                rule="qwen3_5.compressed_tensors",
                passed=False,
                source=f"{SRC_MODEL} Qwen3_5GatedDeltaNet (in_proj_qkv/in_proj_z/out_proj built without a "
                f"prefix); {SRC_CONFIG} QuantizationConfig.get_quant_method",
                detail="compressed-tensors cannot be dispatched for Qwen3.5's linear attention",
                expect="ValueError: compressed-tensors dispatch requires a non-empty canonical module prefix",
            )
        ]
    quantized, plain = linear_storage(ckpt)
    findings = dtype_rule
    gdn_plain = {p for p in plain if ".linear_attn." in p and p.rpartition(".")[2] in GDN_QUANTIZED}
    findings.append(
        Finding(
            rule="qwen3_5.linear_attn_projections_quantized",
            passed=not gdn_plain,
            source=f"{SRC_MODEL} Qwen3_5GatedDeltaNet; {SRC_CONFIG} get_quant_method (empty prefix)",
            detail=(
                f"{_name(gdn_plain)} stored unquantized, but LMDeploy builds in_proj_qkv/in_proj_z/out_proj "
                "quantized whatever modules_to_not_convert says"
                if gdn_plain
                else "in_proj_qkv, in_proj_z, out_proj are quantized"
            ),
            expect=f"KeyError: '{min(gdn_plain)}.weight'" if gdn_plain else "",
        )
    )
    gates = {p for p in quantized if ".linear_attn." in p and p.rpartition(".")[2] in GDN_UNQUANTIZED}
    findings.append(
        Finding(
            rule="qwen3_5.linear_attn_gates_unquantized",
            passed=not gates,
            source=f"{SRC_MODEL} Qwen3_5GatedDeltaNet.in_proj_ba (merged b/a linear without a quant config)",
            detail=(
                f"{_name(gates)} quantized, but LMDeploy fuses in_proj_b/in_proj_a unquantized"
                if gates
                else "in_proj_a, in_proj_b are unquantized"
            ),
            # load_weights renames in_proj_b/in_proj_a to the fused in_proj_ba before looking the name up
            expect=f"KeyError: '{min(gates).rpartition('.')[0]}.in_proj_ba.qweight'" if gates else "",
        )
    )
    visual = {p for p in quantized if ".visual." in f".{p}"}
    findings.append(
        Finding(
            rule="qwen3_5.vision_unquantized",
            passed=not visual,
            source="lmdeploy/pytorch/configurations/qwen3_5.py (quantization_config: text_config only)",
            detail=f"{_name(visual)} quantized; LMDeploy builds the vision tower unquantized"
            if visual
            else "vision tower unquantized",
            expect=f"KeyError: '{min(visual)}.qweight'" if visual else "",
        )
    )
    return findings


def mtp_findings(ckpt: Checkpoint) -> list[Finding]:
    """`--speculative-algorithm qwen3_5_mtp`: the target's MTP tensors exist and are stored the way LMDeploy
    builds the head (empty for other models)."""
    if not is_qwen35(ckpt):
        return []
    layers = int(ckpt.text_config.get("mtp_num_hidden_layers") or 0)
    mtp = {n for n in ckpt.tensors if n.startswith("mtp.")}
    findings = [
        Finding(
            rule="qwen3_5.mtp_weights_present",
            passed=bool(mtp) or layers == 0,
            source=f"{SRC_MTP} Qwen3_5MTPModel.load_weights; lmdeploy/pytorch/weight_loader (no check)",
            detail=f"{len(mtp)} mtp.* tensors" if mtp else "no mtp.* tensors in the checkpoint",
            expect="" if mtp else "loads without error; the MTP head runs uninitialised (acceptance ~0)",
        )
    ]
    q = ckpt.quantization
    if not mtp or q is None:
        return findings
    quantized, plain = linear_storage(ckpt)
    wrong: list[str] = []
    expect = ""
    for prefix in sorted(p for p in plain if p.startswith("mtp.layers.")):
        layer, _, local = prefix.removeprefix("mtp.layers.").partition(".")
        module = MTP_PROJECTIONS.get(local)
        if module is not None and not _lmdeploy_ignores(ckpt, f"mtp.layers.{layer}.{module}"):
            wrong.append(prefix)
            # qwen3_5_mtp.py load_weights: mtp. -> model., q/k/v -> qkv_proj, gate/up -> gate_up_proj
            expect = expect or f"KeyError: 'model.layers.{layer}.{module}.weight'"
    findings.append(
        Finding(
            rule="qwen3_5.mtp_projections_stored_as_built",
            passed=not wrong,
            source=f"{SRC_MTP} Qwen3_5MtpDecoderLayer (quant config of text_config); {SRC_CONFIG} "
            "get_quant_method (modules_to_not_convert matched by substring)",
            detail=(
                f"{_name(set(wrong))} stored unquantized, but LMDeploy builds the MTP layer's projections "
                "quantized unless modules_to_not_convert names its fused modules (e.g. "
                "'mtp.layers.0.self_attn.qkv_proj')"
                if wrong
                else "MTP projections stored as LMDeploy builds them"
            ),
            expect=expect,
        )
    )
    fc_quantized = "mtp.fc" in quantized
    findings.append(
        Finding(
            rule="qwen3_5.mtp_fc_unquantized",
            passed=not fc_quantized,
            source=f"{SRC_MTP} Qwen3_5MultiTokenPredictor.fc (built without a quant config)",
            detail="mtp.fc quantized; LMDeploy never quantizes it" if fc_quantized else "mtp.fc unquantized",
            expect="KeyError: 'model.fc.qweight'" if fc_quantized else "",
        )
    )
    return findings


def mtp_not_convert(ckpt: Checkpoint) -> list[str]:
    """The `modules_to_not_convert` entries that make LMDeploy build a Qwen3.5 MTP layer stored unquantized
    (as gptqmodel keeps `mtp.*`) unquantized: its fused module names (`get_quant_method` matches the module
    prefix as a substring of an entry) and `mtp.fc`. Empty when there is nothing to mark."""
    if not is_qwen35(ckpt):
        return []
    plain = linear_storage(ckpt)[1]
    names = []
    for prefix in sorted(p for p in plain if p.startswith("mtp.layers.")):
        layer, _, local = prefix.removeprefix("mtp.layers.").partition(".")
        module = MTP_PROJECTIONS.get(local)
        if module is not None and f"mtp.layers.{layer}.{module}" not in names:
            names.append(f"mtp.layers.{layer}.{module}")
    return names + (["mtp.fc"] if names and "mtp.fc" in plain else [])


def plain_not_convert(ckpt: Checkpoint) -> list[str]:
    """`modules_to_not_convert` entries declaring what a quantized Qwen3.5 keeps in bf16 besides the MTP
    layer: the Gated DeltaNet gates (`in_proj_a`/`in_proj_b`, fused unquantized by LMDeploy) by their full
    names, and the vision tower (`model.visual`, which LMDeploy builds without a quant config). LMDeploy
    builds those unquantized whatever the list says; the entries tell every other loader (transformers' AWQ
    integration skips a module whose name contains an entry). Empty for other models."""
    if not is_qwen35(ckpt):
        return []
    plain = linear_storage(ckpt)[1]
    gates = sorted(p for p in plain if ".linear_attn." in p and p.rpartition(".")[2] in GDN_UNQUANTIZED)
    visual = sorted({p.partition(".visual.")[0] + ".visual" for p in plain if ".visual." in p})
    return gates + visual


def turbomind_findings(ckpt: Checkpoint) -> list[Finding]:
    """TurboMind's Qwen3.5 vision-tower rule (empty for other models or without a vision tower)."""
    vision = ckpt.config.get("vision_config")
    if not is_qwen35(ckpt) or not vision:
        return []
    heads = int(vision.get("num_heads") or 0)
    hidden = int(vision.get("hidden_size") or 0)
    head_dim = hidden // heads if heads else 0
    ok = head_dim in TM_VIT_HEAD_DIMS
    return [
        Finding(
            rule="qwen3_5.turbomind_vit_head_dim",
            passed=ok,
            source=f"{SRC_TM} _VIT_HEAD_DIM_PADDED",
            detail=f"vision head dim {head_dim}"
            + ("" if ok else f" (TurboMind supports {', '.join(map(str, TM_VIT_HEAD_DIMS))})"),
            expect="" if ok else f"NotImplementedError: Qwen3.5 ViT head_dim={head_dim} not supported",
        )
    ]


def failed(findings: list[Finding]) -> list[str]:
    """One reason per broken rule: what is wrong, what LMDeploy does, and where the rule comes from."""
    return [f"{f.detail} (LMDeploy 0.18: {f.expect}; {f.source})" for f in findings if not f.passed]
