"""`specq convert`: readiness verdicts per engine, GPTQ → AWQ repack, drafter dtype cast."""

from __future__ import annotations

from ._common import emit, out, progress, resolve_given
from ._fields import Given, arg, opt, takes
from ._options import ConfigOpt, JsonOpt, OutOpt


@takes(
    arg("model.model_path", dest="model", required=True, path=True,
        help="Hugging Face model directory (target, or drafter with --dtype)."),
    opt("model.draft_model_path"), opt("model.draft_tokens"), opt("convert.to"), opt("convert.dtype"),
    "out_dir", opt("convert.engine_check"),
)  # fmt: skip
def convert(given: Given, out_dir: OutOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Check a checkpoint (and drafter) for TurboMind, the PyTorch engine and the embedded engine; fix it.

    Exit 2 when what was asked cannot be served as is; the verdicts print the exact fix command. --out
    is the directory to create for --to or --dtype (default: MODEL-awq, -fp16 or -bf16 next to MODEL).

    Example: specq convert ./qwen3-gptq --draft-model ./dflash --draft-tokens 5
    Example: specq convert ./qwen3-gptq --to awq --out ./qwen3-awq
    Example: specq convert ./dflash-bf16 --dtype float16 --out ./dflash-fp16
    """
    from specq.pipeline.convert import ConvertRequest, NotReady, run_convert
    from specq.pipeline.report.text import convert_diagnostics, convert_text

    cfg = resolve_given(config, given, convert={"out": out_dir})
    result = run_convert(ConvertRequest.from_config(cfg), progress=progress)
    refused = not result.ready and result.report is not None  # then stderr holds the one error line only
    diagnostics = [] if refused else convert_diagnostics(result)
    emit(result, as_json, lambda r: convert_text(r, out.width), diagnostics)
    if refused:
        assert result.report is not None
        fixes = result.report.fixes
        hint = f"; fix: {' && '.join(fixes)}" if fixes else ""
        raise NotReady(f"{result.report.model} is not ready to serve as asked{hint}")
