"""Which quantized targets LMDeploy 0.18's PyTorch engine (the only LMDeploy engine that speculates)
accepts, and the exact `specq convert` command that fixes the fixable ones.

Rules (InternLM/lmdeploy): `lmdeploy/pytorch/config.py` `QuantizationConfig` raises
`TypeError: Unsupported quant method: gptq`; `lmdeploy/pytorch/nn/linear/awq.py` `AwqLinear` runs in
float16 with `qweight [K, N/8]`, `scales [K/g, N]`, `qzeros [K/g, N/8]` and asserts `K % group_size == 0`; its
compressed-tensors path accepts group size 32 only.

AWQ alignment: the fused column-wise linears, `QKVAwqLinear` (q/k/v) and `MergedAwqLinear` (gate/up), load
each part through `chunk_aligned(weight, world_size, dim, align)` with align = max(32 // bits, group_size)
(`lmdeploy/pytorch/nn/utils.py:28` asserts `size % align == 0`), even on one GPU. So each of those
projections' output size must be a multiple of 128 for 4-bit group-128 AWQ. o_proj and down_proj load as
plain `AwqLinear`, which on one GPU only needs `K % group_size == 0`. specq applies the rule to the
projections named q/k/v_proj and gate/up_proj. Qwen3.5's linear attention fuses only `in_proj_b`/`in_proj_a`
(into an unquantized `in_proj_ba`); its `in_proj_qkv` is one stored linear; those rules, and the rest of
LMDeploy's Qwen3.5 rules, are `engines/qwen35.py`. What was seen on the H200 for each rule is in
docs/convert.md."""

from __future__ import annotations

from ..checkpoint import Checkpoint
from . import qwen35
from .turbomind import tensor_problems
from .verdict import EngineVerdict, repack_command

PYTORCH_CT_GROUP_SIZES = frozenset({32})
# Quantized targets the PyTorch engine runs in fp16: AWQ (`_update_torch_dtype` forces it), and GPTQ (fp16 by
# construction), whose only route there is specq's AWQ repack.
FP16_QUANT_METHODS = ("awq", "gptq")
FUSED_COLUMN_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


def awq_alignment(bits: int | None, group_size: int | None) -> int:
    """LMDeploy 0.18's `align = max(32 // w_bit, group_size)` for AWQ linears."""
    return max(32 // (bits or 4), group_size or 0)


def fused_alignment_problems(outputs: dict[str, int], bits: int | None, group_size: int | None) -> list[str]:
    """`outputs`: linear prefix -> output features. One line per (projection, size) that breaks the
    fused-AWQ alignment rule, with how many layers have it (empty when all is well)."""
    align = awq_alignment(bits, group_size)
    bad: dict[tuple[str, int], int] = {}
    for prefix, out in outputs.items():
        name = prefix.rpartition(".")[2]
        if name in FUSED_COLUMN_PROJECTIONS and out % align:
            bad[(name, out)] = bad.get((name, out), 0) + 1
    return [
        f"{name} output {out} is not a multiple of {align} ({count} layer{'s' if count > 1 else ''}): "
        f"LMDeploy 0.18's fused AWQ q/k/v and gate/up linears need multiples of max(32 // bits, group_size)"
        for (name, out), count in sorted(bad.items())
    ]


def awq_alignment_problems(target: Checkpoint) -> list[str]:
    """The fused-AWQ alignment rule on a GPTQ or AWQ checkpoint's quantized linears."""
    q = target.quantization
    if q is None:
        return []
    linears = tensor_problems(target, q)[0]
    outputs = {lin.prefix: lin.out_features for lin in linears if lin.out_features is not None}
    return fused_alignment_problems(outputs, q.bits, q.group_size)


def repack_blockers(target: Checkpoint) -> list[str]:
    """Why a GPTQ checkpoint cannot be repacked to AWQ without re-quantizing (empty: it can)."""
    q = target.quantization
    if q is None or q.method != "gptq":
        return ["not a GPTQ checkpoint"]
    blockers = []
    if q.bits != 4:
        blockers.append(f"{q.bits}-bit GPTQ (only 4-bit repacks to AWQ)")
    if q.desc_act:
        blockers.append("act-order GPTQ (desc_act: true) has no AWQ equivalent")
    if q.sym is False:
        blockers.append("asymmetric GPTQ (sym: false): its zero points are not AWQ's fixed 8")
    if not q.group_size or q.group_size < 0:
        blockers.append(f"group_size {q.group_size}: per-channel GPTQ is not repacked")
    if (q.checkpoint_format or "gptq") not in ("gptq", "gptq_v2"):
        blockers.append(f"GPTQ checkpoint_format {q.checkpoint_format!r} (expected gptq or gptq_v2)")
    blockers += tensor_problems(target, q)[1]
    return blockers


def config_dtype(ckpt: Checkpoint) -> str | None:
    """The dtype config.json names (top level, then the text config), as LMDeploy reads it: no guess from
    the tensors."""
    cfg, text = ckpt.config, ckpt.text_config
    said = cfg.get("torch_dtype") or cfg.get("dtype") or text.get("torch_dtype") or text.get("dtype")
    return str(said).replace("torch.", "") if said else None


def auto_dtype(ckpt: Checkpoint) -> tuple[str, str]:
    """The torch dtype ("float16" or "bfloat16") LMDeploy 0.18 runs `ckpt` in under `--dtype auto`, and why.
    Mirrors `lmdeploy/pytorch/config.py::_update_torch_dtype`: AWQ → float16; else the config's dtype when it
    is float16 or bfloat16; anything else (float32, none) → float16. The one mirror of that rule: `specq fa3`
    derives kernels from it, `specq plan` sizes activations with it. The dtype specq actually launches an
    unquantized Gated DeltaNet target in is `qwen35.serve_dtype`'s, which callers apply first."""
    quant = ckpt.quantization
    if quant is not None and quant.method in FP16_QUANT_METHODS:
        return "float16", f"{quant.method.upper()} target: LMDeploy's PyTorch engine runs it in fp16"
    said = config_dtype(ckpt)
    if said in ("float16", "bfloat16"):
        return said, f"config dtype {said}"
    return "float16", f"config dtype {said or 'unset'}: LMDeploy runs it in fp16 (its fallback)"


def pytorch_engine_verdict(target: Checkpoint) -> EngineVerdict:
    q = target.quantization
    if q is None:
        bf16 = qwen35.serve_dtype(target)
        reasons = [f"runs in {bf16}: specq serve passes --dtype {bf16} (engines/qwen35.py)"] if bf16 else []
        return EngineVerdict(engine="pytorch", status="accepted", reasons=reasons)
    m = q.method
    findings = qwen35.pytorch_findings(target)
    arch = qwen35.failed(findings)
    if m == "awq":
        problems = []
        if (q.version or "") != "gemm":
            problems.append(
                f"AWQ version {q.version!r}: the PyTorch engine's AwqLinear takes the gemm layout"
            )
        if q.bits != 4:
            problems.append(f"{q.bits}-bit AWQ: the PyTorch engine runs 4-bit AWQ only")
        problems += tensor_problems(target, q)[1] + awq_alignment_problems(target) + arch
        if problems:
            return EngineVerdict(engine="pytorch", status="refused", reasons=problems[:5], findings=findings)
        runs = qwen35.serve_dtype(target) or "float16"
        why = f"AWQ runs in {runs}" + (" (specq passes --dtype bfloat16)" if runs != "float16" else "")
        return EngineVerdict(engine="pytorch", status="accepted", reasons=[why], findings=findings)
    if m == "gptq":
        reason = "refuses GPTQ (LMDeploy 0.18: 'Unsupported quant method: gptq')"
        blockers = repack_blockers(target)
        # the repack keeps which tensors are quantized, so the architecture rules carry over to the AWQ copy
        misaligned = [] if blockers else awq_alignment_problems(target) + arch
        if blockers or misaligned:
            why = (
                "cannot repack to AWQ: " + "; ".join(blockers[:3])
                if blockers
                else "even repacked to AWQ it would be refused: " + "; ".join(misaligned[:3])
            )
            return EngineVerdict(engine="pytorch", status="refused", reasons=[reason, why], findings=findings)
        return EngineVerdict(
            engine="pytorch",
            status="fixable",
            reasons=[reason + "; the same 4-bit codes repack losslessly to AWQ gemm"],
            fixes=[repack_command(target.path)],
            findings=findings,
        )
    if m == "compressed-tensors":
        if arch:
            return EngineVerdict(engine="pytorch", status="refused", reasons=arch, findings=findings)
        if q.group_size not in PYTORCH_CT_GROUP_SIZES:
            return EngineVerdict(
                engine="pytorch",
                status="refused",
                reasons=[
                    f"compressed-tensors group_size {q.group_size}: LMDeploy 0.18's PyTorch engine takes"
                    " group size 32 only; re-quantize with `specq quantize … --method awq`"
                ],
            )
        problems = tensor_problems(target, q)[1]
        if problems:
            return EngineVerdict(engine="pytorch", status="refused", reasons=problems[:5])
        return EngineVerdict(engine="pytorch", status="accepted")
    return EngineVerdict(
        engine="pytorch", status="accepted", reasons=[f"quant_method {m!r} is not checked by specq"]
    )


def pytorch_engine_refusal(target: Checkpoint) -> str | None:
    """None when LMDeploy 0.18's PyTorch engine accepts `target`; else one line: the reason and, when
    `specq convert` can fix it, the exact command (e.g. `specq convert MODEL --to awq --out MODEL-awq`)."""
    v = pytorch_engine_verdict(target)
    if v.status == "accepted":
        return None
    text = "PyTorch engine " + "; ".join(v.reasons)
    if v.fixes:
        text += f"; fix: {' && '.join(v.fixes)}"
    return text


def quantized_drafter_problems(target: Checkpoint, draft: Checkpoint) -> list[str]:
    """Why LMDeploy 0.18's PyTorch engine cannot serve the quantized drafter `draft` beside `target` (empty:
    it can, or `draft` is not quantized). A 4-bit DFlash drafter is built from its own `quantization_config`
    as `AwqLinear`s once specq's `dflash-awq` patch runs (engines/lmdeploy_compat; whether it applies to the
    LMDeploy installed here is the caller's check): 4-bit AWQ gemm, the fused-linear alignment of a target,
    and the dtype `_update_torch_dtype` gives AWQ (fp16; bf16 under `--dtype bfloat16` with the
    qwen35-awq-bf16 patch, which specq applies beside a 4-bit Gated DeltaNet target), which must be the
    target's."""
    q = draft.quantization
    if q is None:
        return []
    if draft.draft_kind != "dflash":
        return [
            f"{draft.path}: a quantized {draft.draft_kind} drafter; specq serves 4-bit DFlash drafters only "
            "(LMDeploy 0.18 builds an EAGLE-3 drafter's fc unquantized and its linears under the target's "
            "quantization config); serve its bf16 copy"
        ]
    problems: list[str] = []
    if q.method != "awq" or q.bits != 4 or (q.version or "") != "gemm":
        problems.append(
            f"{draft.path}: a {q.bits}-bit {q.method} ({q.version or 'no version'}) drafter; LMDeploy 0.18's "
            "PyTorch engine loads a quantized drafter as 4-bit AWQ gemm only: `specq quantize BF16_DRAFTER "
            "--for speculative --out DIR` writes one"
        )
        return problems
    problems += [f"drafter {p}" for p in tensor_problems(draft, q)[1][:3]]
    problems += [f"drafter {p}" for p in awq_alignment_problems(draft)]
    if target.quantization is None:
        runs = qwen35.serve_dtype(target) or auto_dtype(target)[0]
        if runs != "float16":
            problems.append(
                f"a 4-bit drafter beside the unquantized {runs} target {target.name}: LMDeploy 0.18 runs an "
                f"AWQ drafter in float16, the target in {runs}; serve the drafter's {runs} original, or a "
                "4-bit (AWQ) target"
            )
    return problems
