"""`specq quantize`: 4-bit GPTQ or AWQ with your own calibration data, and a quality report."""

from __future__ import annotations

from ._common import emit, out, progress, resolve_given
from ._fields import Given, arg, opt, takes
from ._options import ConfigOpt, JsonOpt, OutOpt

OPTIONS = [
    "calib", "out_dir", "method", "target", "backend", "bits", "group_size", "sym", "desc_act", "text_field",
    "samples", "seqlen", "seed", "device", "turbomind_check", "evaluate", "eval_samples", "target_model",
]  # fmt: skip


@takes(
    arg(
        "quantize.model",
        dest="model",
        required=True,
        path=True,
        help="Hugging Face model directory (unquantized).",
    ),
    *(k if k == "out_dir" else opt(f"quantize.{k}") for k in OPTIONS),
)
def quantize(
    given: Given, out_dir: OutOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False
) -> None:
    """Quantize a checkpoint to 4-bit GPTQ or AWQ with your calibration data, ready for LMDeploy.

    --out is the directory to create for the quantized checkpoint (it must not exist).

    Example: specq quantize ./Qwen3-8B --calib data.jsonl --out ./Qwen3-8B-awq

    A DFlash drafter (4-bit AWQ gemm): specq quantize ./Qwen3-8B-DFlash --target-model ./Qwen3-8B-awq
    --calib data.jsonl --out ./Qwen3-8B-DFlash-awq
    """
    from specq.pipeline.quantize import QuantizeRequest
    from specq.pipeline.quantize import quantize as run
    from specq.pipeline.report.text import quantize_text

    request = QuantizeRequest.from_config(resolve_given(config, given, quantize={"out": out_dir}))
    result = run(request, progress=progress)
    emit(result, as_json, lambda r: quantize_text(r, out.width))
