"""`specq quantize`: 4-bit GPTQ or AWQ with your own calibration data, and a quality report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import emit, out, progress, resolve
from ._options import ConfigOpt, JsonOpt, OutOpt

Opt = typer.Option


def quantize(
    model: Annotated[Path, typer.Argument(help="Hugging Face model directory (unquantized).")],
    calib: Annotated[
        str | None,
        Opt(
            "--calib",
            help="Calibration: FILE (.jsonl .json .parquet .csv .txt), DIR, or hub NAME[:CONFIG[:SPLIT]].",
        ),
    ] = None,
    out_dir: OutOpt = None,
    method: Annotated[
        str | None,
        Opt(
            "--method",
            help="Quantization method: gptq | awq (default: awq --for speculative, gptq --for plain).",
        ),
    ] = None,
    target: Annotated[
        str | None,
        Opt("--for", help="speculative (default: output the PyTorch engine speculates with) | plain."),
    ] = None,
    quant_backend: Annotated[
        str | None,
        Opt(
            "--quant-backend",
            help="Quantization backend: gptqmodel (default) | llmcompressor | autoawq | lmdeploy.",
        ),
    ] = None,
    bits: Annotated[int | None, Opt("--bits", help="Weight bits (TurboMind: 4).")] = None,
    group_size: Annotated[
        int | None,
        Opt(
            "--group-size",
            help="128 (TurboMind; others need --no-turbomind-check).",
        ),
    ] = None,
    sym: Annotated[
        bool | None, Opt("--sym/--asym", help="Symmetric (GPTQ default) or with zero points (AWQ default).")
    ] = None,
    desc_act: Annotated[
        bool | None, Opt("--desc-act/--no-desc-act", help="GPTQ act-order (TurboMind: off).")
    ] = None,
    text_field: Annotated[
        str | None, Opt("--text-field", help="Text column (default: text; chat 'messages' is rendered).")
    ] = None,
    samples: Annotated[int | None, Opt("--samples", help="Calibration samples (default 128).")] = None,
    seqlen: Annotated[
        int | None, Opt("--seqlen", help="Tokens per sample; short texts are packed (default 512).")
    ] = None,
    seed: Annotated[int | None, Opt("--seed", help="Shuffle seed for the calibration texts.")] = None,
    device: Annotated[str | None, Opt("--device", help="auto | cpu | cuda.")] = None,
    turbomind_check: Annotated[
        bool | None, Opt("--turbomind-check/--no-turbomind-check", help="Refuse settings TurboMind rejects.")
    ] = None,
    evaluate: Annotated[
        bool | None, Opt("--eval/--no-eval", help="Perplexity and logits cosine, original vs quantized.")
    ] = None,
    eval_samples: Annotated[
        int | None, Opt("--eval-samples", help="Held-out samples for perplexity.")
    ] = None,
    target_model: Annotated[
        Path | None,
        Opt(
            "--target-model",
            help="MODEL is a DFlash drafter: the target whose hidden states calibrate it (GPTQ); "
            "without it, round-to-nearest.",
        ),
    ] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
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

    section = dict(model=str(model), calib=calib, out=out_dir, method=method,
                   backend=quant_backend, bits=bits, group_size=group_size, sym=sym, desc_act=desc_act,
                   text_field=text_field, samples=samples, seqlen=seqlen, seed=seed, device=device,
                   turbomind_check=turbomind_check, evaluate=evaluate, eval_samples=eval_samples,
                   target_model=str(target_model) if target_model else None)  # fmt: skip
    section["for"] = target
    request = QuantizeRequest.from_config(resolve(config, quantize=section))
    result = run(request, progress=progress)
    emit(result, as_json, lambda r: quantize_text(r, out.width))
