"""`specq quantize DRAFTER --for speculative`: a DFlash drafter to 4-bit AWQ gemm (the layout LMDeploy's
PyTorch engine builds as `AwqLinear`), quantized by specq itself, since the quantization backends load causal
LMs only. Every decoder-layer projection and `fc` are quantized (`draft.contract.QUANTIZABLE`); the norms,
and any embedding or head a checkpoint carries (the target's, shared), are copied as they are.

- With `target_model`, GPTQ calibrated on what the drafter sees when it is served: the target's hidden states
  at the drafter's `target_layer_ids` over the calibration text (its context, through `fc`, `hidden_norm`
  and each layer's `k_proj`/`v_proj`), and query blocks `[token, MASK × (B − 1)]` embedded with the target's
  embeddings, one every B positions. Layer by layer: each layer's inputs come from the layers before it
  already quantized.
- Without one (or `--no-calibration`-like cases where the target cannot be loaded), round-to-nearest, said in
  the report (`drafter.algorithm`, `drafter.why_rtn`).

The report (`QuantizeResult.drafter`) has each linear's output error on the calibration inputs and the
cosine of the drafter's final hidden states, original against 4-bit, on calibration blocks. What decides
whether a 4-bit drafter is worth it is its acceptance: `specq draft eval TARGET DRAFT4` against the bf16
drafter's (docs/draft.md)."""

from __future__ import annotations

import gc
import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checkpoint import Checkpoint, validate_checkpoint
from ..config.models import QuantizeSection
from ..errors import InputError, UsageError
from ..fsutil import atomic_dir, atomic_write_text, check_writable
from ..progress import Progress
from .result import (
    CONFIG_FILE,
    REPORT_FILE,
    DrafterQuantReport,
    QuantizeResult,
    checkpoint_bytes,
    versions_of,
)

if TYPE_CHECKING:
    from ..calibration import CalibrationReport

RTN_WARNING = "round-to-nearest: the drafter was not calibrated (no --target-model)"
COSINE_SAMPLES = 8  # calibration samples whose final hidden states are compared, original vs 4-bit
# files of the source that describe its weights (the bf16 drafter's): the 4-bit copy gets its own or none
NOT_COPIED = ("config.json", "model.safetensors.index.json", "draft_report.json", "specq-draft.toml",
              "quant_report.json", "specq-quantize.toml", "specq-manifest.json")  # fmt: skip


def refusal(cfg: QuantizeSection, draft: Checkpoint) -> str | None:
    """Why `cfg` cannot quantize the drafter `draft` (None: it can)."""
    if draft.draft_kind != "dflash":
        return (
            f"{draft.path} is a {draft.draft_kind} drafter; specq quantizes DFlash drafters (LMDeploy 0.18 "
            "builds an EAGLE-3 drafter's fc unquantized and its linears under the target's quantization "
            "config); serve it in bf16/fp16"
        )
    if cfg.target != "speculative":
        return "a drafter serves only with speculation: quantize it with --for speculative"
    if cfg.method not in (None, "awq"):
        return (
            f"--method {cfg.method}: a drafter is written as 4-bit AWQ gemm, the one LMDeploy loads beside "
            "a target"
        )
    if cfg.bits != 4:
        return f"--bits {cfg.bits}: LMDeploy's PyTorch engine loads 4-bit AWQ only"
    if cfg.group_size <= 0:
        return f"--group-size {cfg.group_size}: LMDeploy's AwqLinear needs a group size, e.g. 128"
    if cfg.backend is not None:
        return (
            f"--quant-backend {cfg.backend}: the backends load causal LMs, not DFlash drafters; specq "
            "quantizes drafters itself (drop --quant-backend)"
        )
    return None


def quantize_drafter(cfg: QuantizeSection, progress: Progress, started: float) -> QuantizeResult:
    """Quantize the DFlash drafter `cfg.model` into `cfg.out` (atomically); see the module docstring."""
    from ..draft import contract

    assert cfg.model and cfg.out  # QuantizeRequest requires both
    model, out = Path(cfg.model), Path(cfg.out)
    draft = Checkpoint(model)
    why = refusal(cfg, draft)
    if why:
        raise UsageError(why)
    target = Checkpoint(cfg.target_model) if cfg.target_model else None
    if target is not None:
        validate_checkpoint(target, role="target")
        if not cfg.calib:
            raise UsageError(
                "no calibration data for the drafter: pass --calib FILE|DIR|HUB_NAME (the text the target "
                "reads to give the drafter its hidden states)"
            )
    validate_checkpoint(draft, role="drafter")
    problems = contract.check_drafter(draft, target)
    if problems:
        raise InputError(f"{draft.path}: not a valid LMDeploy DFlash drafter: {problems[0]}")
    _check_sizes(draft.config, cfg.group_size)
    if out.exists():
        raise InputError(f"{out} already exists; choose another --out or remove it")
    check_writable(out, need_bytes=draft.file_bytes // 3)
    from ..hardware import cpu_threads, pick_device

    device = pick_device(cfg.device)
    with cpu_threads(None):
        return _quantize(cfg, draft, target, device, progress, started)


def _check_sizes(config: dict[str, Any], group: int) -> None:
    from ..draft.contract import expected_tensors

    shapes = expected_tensors({k: v for k, v in config.items() if k != "quantization_config"})
    for name, shape in shapes.items():
        if name.endswith(".weight") and len(shape) == 2 and not name.endswith("norm.weight"):
            n_out, n_in = shape
            if n_in % group or n_out % 8:
                raise UsageError(
                    f"--group-size {group}: {name.removesuffix('.weight')} is {n_in} -> {n_out}; AWQ needs "
                    f"inputs that are a multiple of the group size and outputs a multiple of 8"
                )


def _quantize(
    cfg: QuantizeSection,
    draft: Checkpoint,
    target: Checkpoint | None,
    device: str,
    progress: Progress,
    started: float,
) -> QuantizeResult:
    import torch

    from ..draft.eval import load_drafter
    from ._gptq import gptq, output_error, rtn

    dcfg = draft.config["dflash_config"]
    layer_ids = [int(i) for i in dcfg["target_layer_ids"]]
    bits, group, sym = cfg.bits, cfg.group_size, bool(cfg.sym)  # AWQ: zero points unless --sym
    calib = target is not None
    data: list[dict[str, Any]] = []
    if target is not None:
        data, calib_report = _calibration_data(
            cfg, target, layer_ids, int(dcfg["mask_token_id"]), draft.dflash_block_size or 0, device, progress
        )
    else:
        calib_report = _no_calibration(cfg)
        ignored = f" (--calib {cfg.calib} is not read without one)" if cfg.calib else ""
        progress(
            f"warning: no --target-model{ignored}: round-to-nearest (no calibration); pass --target-model "
            "TARGET --calib DATA to calibrate on the target's hidden states"
        )
    drafter, _ = load_drafter(draft, device)
    drafter.requires_grad_(False)
    report = DrafterQuantReport(
        algorithm="gptq" if calib else "rtn",
        target=str(target.path) if target is not None else None,
        why_rtn=None if calib else "no --target-model: nothing to take the drafter's inputs from",
        target_layer_ids=layer_ids,
        output_error_basis="calibration inputs" if calib else "weights",
    )
    linears = _linears(drafter)
    t0 = time.perf_counter()
    before = _final_hidden(drafter, data[:COSINE_SAMPLES], device) if calib and cfg.evaluate else None
    results: dict[str, Any] = {}
    if calib:
        report.blocks = sum(int(d["anchors"].numel()) for d in data)
        report.context_tokens = sum(int(d["features"].shape[1]) for d in data)
        groups = [["fc"]] + [
            [n for n in linears if n.startswith(f"layers.{i}.")] for i in range(len(drafter.layers))
        ]
        for step, names in enumerate(groups):
            progress(f"GPTQ (drafter): {'fc' if step == 0 else f'layer {step}/{len(groups) - 1}'}")
            hessians = _hessians(drafter, data, names, step - 1, device)
            for name in names:
                w = linears[name].weight.data
                q = gptq(w, hessians[name], bits, group, sym)
                report.output_error[name] = round(output_error(w, q.dequantized, hessians[name]), 6)
                results[name] = q
                linears[name].weight.data.copy_(q.dequantized.to(w.dtype))
            del hessians
    else:
        for i, (name, lin) in enumerate(linears.items()):
            if i % 7 == 0:
                progress(f"round-to-nearest (drafter): {i}/{len(linears)} linears")
            w = lin.weight.data
            q = rtn(w, bits, group, sym)
            report.output_error[name] = round(output_error(w, q.dequantized, None), 6)
            results[name] = q
    t_quant = time.perf_counter() - t0
    if before is not None:
        after = _final_hidden(drafter, data[:COSINE_SAMPLES], device)
        cos = torch.cat(
            [torch.nn.functional.cosine_similarity(a, b, dim=-1) for a, b in zip(before, after, strict=True)]
        )
        report.hidden_cosine_mean, report.hidden_cosine_min = (
            round(float(cos.mean()), 6),
            round(float(cos.min()), 6),
        )
    report.quantized = sorted(results)
    out = Path(str(cfg.out))
    with atomic_dir(out) as tmp:
        report.kept = _write(draft, tmp, results, group, sym)
        from ..config import SpecqConfig, config_to_toml

        resolved = QuantizeSection.model_validate(
            {**cfg.model_dump(), "method": "awq", "sym": sym, "device": device}
        )
        atomic_write_text(tmp / CONFIG_FILE, config_to_toml(SpecqConfig(quantize=resolved), ("quantize",)))
        size_o, size_q = checkpoint_bytes(draft.path), checkpoint_bytes(tmp)
        result = QuantizeResult(
            model=str(draft.path), out=str(out), method="awq", backend="specq", target=cfg.target, bits=bits,
            group_size=group, sym=sym, desc_act=False, device=device, format="awq", turbomind_check=False,
            warnings=[] if calib else [RTN_WARNING],
            calibration=calib_report, size_original_bytes=size_o, size_quantized_bytes=size_q,
            compression_ratio=(size_o / size_q) if size_q else 0.0,
            seconds_total=time.perf_counter() - started,
            seconds_quantize=t_quant, layers=len(drafter.layers), drafter=report,
            versions=versions_of(["torch", "transformers"]),
        )  # fmt: skip
        atomic_write_text(tmp / REPORT_FILE, result.model_dump_json(indent=2) + "\n")
    progress(f"wrote {out}")
    return result


def _no_calibration(cfg: QuantizeSection) -> CalibrationReport:
    from ..calibration import CalibrationReport

    return CalibrationReport(
        source="none", kind="none", texts=0, tokens_total=0, samples=0, samples_requested=0, seqlen=0,
        tokens_used=0, heldout_samples=0, heldout_tokens=0,
        notes=["round-to-nearest: no --target-model, so no hidden states to calibrate the drafter on"],
    )  # fmt: skip


def _calibration_data(
    cfg: QuantizeSection,
    target_ckpt: Checkpoint,
    layer_ids: list[int],
    mask_id: int,
    block: int,
    device: str,
    progress: Progress,
) -> tuple[list[dict[str, Any]], CalibrationReport]:
    """The target's features at `layer_ids` over the calibration samples, with the query blocks' embeddings
    (anchor token, then MASK), one block every `block` positions: what the drafter reads when served."""
    import torch

    from ..calibration import load_calibration, load_tokenizer
    from ..draft.data import Target

    assert cfg.calib is not None
    calib = load_calibration(
        cfg.calib, load_tokenizer(target_ckpt.path), text_field=cfg.text_field, samples=cfg.samples,
        seqlen=cfg.seqlen, seed=cfg.seed, heldout_samples=0, progress=progress,
    )  # fmt: skip
    rep = calib.report
    progress(f"calibration: {rep.samples} samples, {rep.tokens_used} tokens (seqlen {rep.seqlen})")
    target = Target(target_ckpt.path, device, progress)
    store = torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16
    data: list[dict[str, Any]] = []
    with torch.no_grad():
        mask_embed = target.embed(torch.tensor([mask_id], device=target.device)).float()
        for ids in calib.samples:
            t = len(ids)
            if t < block + 1:
                continue
            tokens = torch.tensor([ids])
            feats, _ = target.features(tokens, layer_ids)
            anchors = torch.arange(1, t - block + 1, block)[None]
            embeds = target.embed(tokens.to(target.device)).float()[0]
            q = mask_embed.expand(anchors.shape[1] * block, -1).clone()
            q[::block] = embeds[anchors[0]]
            data.append({"features": feats.to(store), "anchors": anchors, "query": q[None].to(store).cpu()})
    del target
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if not data:
        raise InputError(f"--calib {cfg.calib}: no sample has more than {block} tokens; raise --seqlen")
    progress(f"target features at layers {layer_ids} for {len(data)} samples")
    return data, rep


def _linears(drafter: Any) -> dict[str, Any]:
    """The drafter's quantizable linears by checkpoint name (`layers.N.self_attn.q_proj`, ..., `fc`)."""
    from ..draft.contract import QUANTIZABLE

    out = {"fc": drafter.fc}
    for i, layer in enumerate(drafter.layers):
        for name in QUANTIZABLE:
            part, proj = name.split(".")
            out[f"layers.{i}.{name}"] = getattr(getattr(layer, part), proj)
    return out


class _Stop(Exception):
    """Raised after the layer being calibrated: the layers after it need not run."""


def _forward(drafter: Any, d: dict[str, Any], device: str) -> Any:
    import torch

    from ..draft.model import block_mask

    feats = d["features"].to(device, torch.float32)
    t = feats.shape[1]
    anchors = d["anchors"].to(device)
    block = d["query"].shape[1] // anchors.shape[1]
    ctx_pos = torch.arange(t, device=device)[None]
    q_pos = (anchors[:, :, None] + torch.arange(block, device=device)).reshape(1, -1)
    mask = block_mask(t, anchors, block)
    return drafter(feats, ctx_pos, d["query"].to(device, torch.float32), q_pos, mask)


def _hessians(drafter: Any, data: list[dict[str, Any]], names: list[str], layer: int, device: str) -> dict:
    """Σ xᵀx of the inputs of each linear in `names` over the calibration data (layer −1: fc, whose input is
    the features themselves); the forward stops after `layer`."""
    import torch

    linears = _linears(drafter)
    hs = {n: torch.zeros(linears[n].in_features, linears[n].in_features, device=device) for n in names}
    if layer < 0:
        for d in data:
            x = d["features"][0].to(device, torch.float32)
            hs["fc"] += x.T @ x
        return hs

    def hook(name: str) -> Any:
        def pre(module: Any, args: Any) -> None:
            x = args[0].reshape(-1, args[0].shape[-1]).float()
            hs[name] += x.T @ x

        return pre

    handles = [linears[n].register_forward_pre_hook(hook(n)) for n in names]

    def stop(module: Any, args: Any, output: Any) -> None:
        raise _Stop

    handles.append(drafter.layers[layer].register_forward_hook(stop))
    try:
        with torch.no_grad():
            for d in data:
                try:
                    _forward(drafter, d, device)
                except _Stop:
                    pass
    finally:
        for h in handles:
            h.remove()
    return hs


def _final_hidden(drafter: Any, data: list[dict[str, Any]], device: str) -> list[Any]:
    import torch

    with torch.no_grad():
        return [_forward(drafter, d, device)[0].float().cpu() for d in data]


def _write(draft: Checkpoint, out: Path, results: dict[str, Any], group: int, sym: bool) -> list[str]:
    """config.json with the AWQ quantization_config and model.safetensors: each quantized linear's AWQ gemm
    tensors in place of its weight, every other tensor as it was. Returns the names kept."""
    import numpy as np
    import torch
    from safetensors.torch import load_file, save_file

    from ..convert.repack import pack_awq_linear
    from ..draft.contract import DTYPE_FIELDS, QUANT_FIELD

    tensors: dict[str, Any] = {}
    kept: list[str] = []
    for f in draft.weight_files:
        for name, t in load_file(str(f)).items():
            raw = name.removesuffix(".weight")
            prefix = raw.removeprefix("model.")  # names as LMDeploy (and load_drafter) normalise them
            if prefix.startswith("midlayer."):
                prefix = prefix.replace("midlayer.", "layers.0.", 1)
            if name.endswith(".weight") and prefix in results:
                q = results.pop(prefix)
                qw, qz, sc = pack_awq_linear(
                    q.codes.T.cpu().numpy(),
                    q.zeros.T.cpu().numpy(),
                    q.scales.T.cpu().numpy().astype(np.float32),
                )
                tensors[f"{raw}.qweight"] = torch.from_numpy(qw)
                tensors[f"{raw}.qzeros"] = torch.from_numpy(qz)
                tensors[f"{raw}.scales"] = torch.from_numpy(sc)
            else:
                tensors[name] = t
                kept.append(name)
    if results:
        raise InputError(f"{draft.path}: no weight tensor for {sorted(results)[0]} in the checkpoint's files")
    save_file(dict(sorted(tensors.items())), str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {k: v for k, v in draft.config.items() if k not in (*DTYPE_FIELDS, QUANT_FIELD)}
    config.update(dict.fromkeys(DTYPE_FIELDS, "float16"))  # AWQ runs in fp16 (bf16 beside a 4-bit Qwen3.5)
    # qzeros are written either way (8 for --sym), so zero_point is true: AutoAWQ's keys, as convert writes
    config[QUANT_FIELD] = {
        "quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm",
        "modules_to_not_convert": None,
    }  # fmt: skip
    atomic_write_text(out / "config.json", json.dumps(config, indent=2) + "\n")
    for f in sorted(draft.path.iterdir()):  # side files (a README, a license), not what describes the weights
        if f.is_file() and f.suffix != ".safetensors" and f.name not in NOT_COPIED:
            shutil.copy2(f, out / f.name)
    return sorted(kept)
