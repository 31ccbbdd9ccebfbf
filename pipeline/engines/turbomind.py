"""TurboMind's load-time rules, mirrored from LMDeploy 0.18 so that a checkpoint is judged in a second on any
machine instead of minutes into a GPU launch. Sources (InternLM/lmdeploy):
- `lmdeploy/turbomind/supported_models.py`: `SUPPORTED_ARCHS` and `is_supported` (architectures[0] must be a
  key; `smooth_quant` checkpoints are refused).
- `lmdeploy/turbomind/converter.py`: `get_tm_config` (AWQ must be `version: gemm`; GPTQ must be symmetric
  without `desc_act`; compressed-tensors must be `pack-quantized`, 4-bit `int`) and `_SUPPORTED_GROUP_SIZES`.
- `lmdeploy/turbomind/weight_format.py`: `AWQFormat` / `GPTQFormat` / `CompressedTensorFormat` (int4 storage,
  `qweight`/`scales`/`qzeros` or `weight_packed`/`weight_scale`; AWQ has no way to synthesise missing zeros,
  GPTQ and compressed-tensors default them to 8).
`tests/unit/engines/test_turbomind_mirror.py` compares this mirror with the installed lmdeploy when
present."""

from __future__ import annotations

from ..checkpoint import Checkpoint, QuantInfo
from ..errors import InputError
from . import qwen35
from .layout import QuantLinear, quantized_linears
from .verdict import EngineVerdict

# lmdeploy/turbomind/supported_models.py: architecture -> TurboMind model name, as in LMDeploy 0.18.0's
# released source (when it was last compared: docs/convert.md; tests/unit/engines/test_turbomind_mirror.py).
SUPPORTED_ARCHS: dict[str, str] = {
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2-moe",
    "Qwen2VLForConditionalGeneration": "qwen2_vl",
    "Qwen2_5_VLForConditionalGeneration": "qwen2_vl",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3-moe",
    "Qwen3_5ForConditionalGeneration": "qwen3_5",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5-moe",
    "InternS2PreviewForConditionalGeneration": "qwen3_5-moe",
    "InternS2MobiusForConditionalGeneration": "interns2_mobius",
    "InternVLChatModel": "internvl",
    "InternVLForConditionalGeneration": "internvl",
    "InternS1ForConditionalGeneration": "internvl",
    "LlamaForCausalLM": "llama",
    "InternLM2ForCausalLM": "internlm2",
    "InternLM3ForCausalLM": "llama",
    "Glm4MoeLiteForCausalLM": "glm4-moe-lite",
    "GptOssForCausalLM": "gpt-oss",
    "MixtralForCausalLM": "mixtral",
}

# lmdeploy/turbomind/converter.py `_SUPPORTED_GROUP_SIZES`: the combinations verified end to end.
SUPPORTED_GROUP_SIZES: dict[str, frozenset[int]] = {
    "awq": frozenset({128}),
    "gptq": frozenset({128}),
    "compressed-tensors": frozenset({32, 128}),
    "fp8": frozenset({128}),
    "mxfp4": frozenset({32}),
}
DEFAULT_GROUP_SIZES = {"awq": 128, "gptq": 128, "compressed-tensors": 128, "fp8": 128, "mxfp4": 32}
QUANT_METHODS = ("awq", "gptq", "compressed-tensors", "fp8", "mxfp4")
INT4_METHODS = ("awq", "gptq", "compressed-tensors")
# The int4 GEMM kernels tile the output dimension; TurboMind needs output sizes that are multiples of 32.
OUTPUT_MULTIPLE = 32


def architecture_problems(ckpt: Checkpoint) -> list[str]:
    archs = ckpt.architectures
    if not archs:
        return ["config.json has no `architectures`; TurboMind cannot pick a model class"]
    if archs[0] not in SUPPORTED_ARCHS:
        return [
            f"architecture {archs[0]} is not in TurboMind's supported list (LMDeploy 0.18 SUPPORTED_ARCHS); "
            "use the PyTorch engine (--backend pytorch)"
        ]
    if archs[0] == "Glm4MoeLiteForCausalLM" and ckpt.config.get("vision_config") is not None:
        return ["TurboMind does not load Glm4MoeLite with a vision_config (LMDeploy 0.18 is_supported)"]
    return []


def quant_config_problems(q: QuantInfo) -> list[str]:
    """`get_tm_config`'s assertions and group-size validation, plus int4 storage (4 bits)."""
    m = q.method
    if m == "smooth_quant":
        return ["TurboMind does not load smooth_quant checkpoints"]
    if m not in QUANT_METHODS:
        return [f"TurboMind does not support quant_method {m!r} (supported: {', '.join(QUANT_METHODS)})"]
    problems = []
    if m == "awq" and (q.version or "") != "gemm":
        problems.append(f"AWQ version {q.version!r}: TurboMind loads only version 'gemm'")
    if m == "gptq":
        if q.desc_act:
            problems.append("GPTQ with desc_act (act-order) is not supported by TurboMind")
        if q.sym is False:
            problems.append("asymmetric GPTQ (sym: false) is not supported by TurboMind")
    if m == "compressed-tensors":
        groups = q.raw.get("config_groups") or {}
        g0 = groups.get("group_0") or {}
        fmt = g0.get("format") or q.checkpoint_format
        if fmt != "pack-quantized":
            problems.append(f"compressed-tensors format {fmt!r}: TurboMind loads only 'pack-quantized'")
        w = g0.get("weights") or {}
        if w.get("type", "int") != "int":
            problems.append(f"compressed-tensors weights type {w.get('type')!r}: TurboMind needs 'int'")
    if m in INT4_METHODS and q.bits != 4:
        problems.append(f"{q.bits}-bit {m}: TurboMind's kernels take 4-bit weights only")
    group = q.group_size if q.group_size not in (None, 0) else DEFAULT_GROUP_SIZES.get(m)
    allowed = SUPPORTED_GROUP_SIZES.get(m)
    if m == "mxfp4":
        group = 32
    if allowed is not None and group not in allowed:
        problems.append(
            f"group_size {group} for {m}: TurboMind supports {', '.join(map(str, sorted(allowed)))}"
        )
    return problems


def kernel_shape_problems(linears: list[QuantLinear]) -> list[str]:
    problems = []
    for lin in linears:
        if lin.out_features is not None and lin.out_features % OUTPUT_MULTIPLE:
            problems.append(
                f"{lin.prefix}: output size {lin.out_features} is not a multiple of {OUTPUT_MULTIPLE}"
            )
    return problems


def tensor_problems(ckpt: Checkpoint, q: QuantInfo) -> tuple[list[QuantLinear], list[str]]:
    """Per-linear tensor problems (names, dtypes, shapes) for a packed int4 checkpoint."""
    if q.method not in INT4_METHODS:
        return [], []
    linears = quantized_linears(ckpt, q)
    if not linears:
        return [], [f"quantization_config says {q.method}, but no quantized linear tensors were found"]
    problems = [p for lin in linears for p in lin.problems]
    return linears, problems


def check_quantized_tensors(ckpt: Checkpoint, role: str = "target") -> None:
    """Refuse (exit 2) a quantized checkpoint a quantized linear of which lacks a tensor its format needs,
    or has one of the wrong dtype or shape: every loader fails on it (gptqmodel with a traceback and its
    banner), so every command that loads or serves one asks first."""
    q = ckpt.quantization
    problems = tensor_problems(ckpt, q)[1] if q is not None else []
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(f"{role} {ckpt.path}: {problems[0]}{more}; the quantized checkpoint is damaged")


def turbomind_verdict(ckpt: Checkpoint, max_reasons: int = 5) -> EngineVerdict:
    problems = architecture_problems(ckpt)
    findings = qwen35.turbomind_findings(ckpt)  # the vision tower's head dim (Qwen3.5)
    problems += qwen35.failed(findings)
    q = ckpt.quantization
    if q is not None:
        problems += quant_config_problems(q)
        linears, tproblems = tensor_problems(ckpt, q)
        problems += tproblems + kernel_shape_problems(linears)
    if problems:
        return EngineVerdict(
            engine="turbomind", status="refused", reasons=_cap(problems, max_reasons), findings=findings
        )
    return EngineVerdict(engine="turbomind", status="accepted", findings=findings)


def turbomind_problems(method: str, bits: int, group_size: int, sym: bool, desc_act: bool) -> list[str]:
    """Why TurboMind would refuse the checkpoint a `specq quantize` request produces (the request phrased as
    the `quantization_config` it would write, plus the AWQ rule that depends on how the backend is asked to
    quantize); empty when it accepts it."""
    q = QuantInfo(
        method=method,
        bits=bits,
        group_size=group_size,
        sym=sym,
        desc_act=desc_act,
        version="gemm" if method == "awq" else None,
    )
    problems = quant_config_problems(q)
    if method == "awq":
        if sym:
            # TurboMind's AWQ loader cannot synthesise zeros (weight_format.py AWQFormat)
            problems.append("AWQ without zero points (TurboMind needs AWQ gemm with zeros: sym=false)")
        if desc_act:
            problems.append("desc_act is a GPTQ option; AWQ has no act-order")
    return problems


def _cap(problems: list[str], n: int) -> list[str]:
    if len(problems) <= n:
        return problems
    return problems[:n] + [f"… and {len(problems) - n} more"]
