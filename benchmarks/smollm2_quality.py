"""Quantization quality on a real model: SmolLM2-135M-Instruct (`specq toy fetch smollm2`) quantized by
`specq quantize` with GPTQ and AWQ at several group sizes and two calibration sets, each scored against the
bf16 checkpoint on held-out real text: perplexity and top-1 agreement (greedy next token equal to the bf16
model's, teacher-forced on the same text).

Data, all from this machine (nothing downloaded):
- calibration "chat/code": the built-in bench suites' prompts (chats rendered through the model's chat
  template) and the toy corpus's training files (standard-library Python sources);
- calibration "prose": Python's own reference manual text (`pydoc_data.topics`, 4 topics in 5) and five
  license texts from /usr/share/common-licenses;
- held-out "prose": the other fifth of the reference-manual topics; held-out "code": the toy corpus's
  held-out standard-library files (neither is in any calibration set).

    python benchmarks/smollm2_quality.py --out specq-out/smollm2-quality [--samples 32 --seqlen 256]

Writes OUT/results.json and OUT/table.md; each quantized checkpoint stays in OUT/<method>-g<group>-<calib>.
A variant `specq quantize` refuses (e.g. a group size that does not divide the hidden size) is recorded
with its one-line error."""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LICENSES = ("GPL-3", "Apache-2.0", "MPL-2.0", "LGPL-3", "GFDL-1.3")


def build_data(out: Path, model: Path) -> dict[str, Path]:
    import pydoc_data.topics as topics

    from transformers import AutoTokenizer

    from specq.pipeline.toy.corpus import load_corpus
    from specq.pipeline.workload import load_suite, suite_names

    keys = sorted(topics.topics)
    prose_train = [topics.topics[k] for i, k in enumerate(keys) if i % 5 != 2]
    prose_held = [topics.topics[k] for i, k in enumerate(keys) if i % 5 == 2]
    lic = Path("/usr/share/common-licenses")
    prose_train += [(lic / n).read_text(encoding="utf-8") for n in LICENSES if (lic / n).is_file()]
    corpus = load_corpus()
    tok = AutoTokenizer.from_pretrained(str(model))
    chat: list[str] = []
    for suite in suite_names():
        for p in load_suite(suite):
            chat.append(tok.apply_chat_template(p.as_messages(), tokenize=False, add_generation_prompt=True))
    files = {
        "chatcode": (chat + corpus.train[:200]),
        "prose": prose_train,
        "heldout-prose": prose_held,
        "heldout-code": corpus.heldout,
    }
    paths = {}
    for name, texts in files.items():
        p = out / f"{name}.jsonl"
        p.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        paths[name] = p
    return paths


def chunks(tok: Any, path: Path, n: int, length: int) -> list[list[int]]:
    """`n` windows of `length` tokens, one from each text in turn (round robin), so every text counts."""
    ids = [tok(json.loads(line)["text"], add_special_tokens=False)["input_ids"] for line in path.open()]
    out: list[list[int]] = []
    offset = 0
    while len(out) < n and any(len(x) >= offset + length for x in ids):
        for x in ids:
            if len(x) >= offset + length and len(out) < n:
                out.append(x[offset : offset + length])
        offset += length
    return out


def quantize(model: Path, out: Path, method: str, group: int, calib: Path, args: argparse.Namespace) -> dict:
    argv = [
        str(Path(sys.executable).with_name("specq")), "quantize", str(model), "--method", method,
        "--for", "plain", "--group-size", str(group), "--no-turbomind-check", "--calib", str(calib),
        "--samples", str(args.samples), "--seqlen", str(args.seqlen), "--no-eval", "--out", str(out),
        "--json",
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    rec: dict[str, Any] = {"rc": proc.returncode, "wall_s": round(time.monotonic() - t0, 1)}
    if proc.returncode != 0:
        rec["error"] = (proc.stderr.strip().splitlines() or [""])[-1]
    else:
        r = json.loads(proc.stdout)
        rec.update(seconds_quantize=round(r["seconds_quantize"], 1), size_bytes=r["size_quantized_bytes"])
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", type=Path, default=None, help="default: the cached smollm2 checkpoint")
    ap.add_argument("--methods", nargs="+", default=["gptq", "awq"])
    ap.add_argument("--groups", nargs="+", type=int, default=[32, 64, 128])
    ap.add_argument("--calibs", nargs="+", default=["chatcode", "prose"])
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--seqlen", type=int, default=256)
    ap.add_argument("--eval-chunks", type=int, default=16)
    ap.add_argument("--eval-len", type=int, default=256)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(2)
    from transformers import AutoTokenizer

    from specq.pipeline.engines.embedded import load_quantized
    from specq.pipeline.quantize.quality import load_original, score, top1_agreement
    from specq.pipeline.toy.smollm2 import locate

    model = args.model or locate()
    if model is None:
        sys.exit("no smollm2 checkpoint: run `specq toy fetch smollm2` first")
    args.out.mkdir(parents=True, exist_ok=True)
    data = build_data(args.out, model)
    tok = AutoTokenizer.from_pretrained(str(model))
    held = {k: chunks(tok, data[f"heldout-{k}"], args.eval_chunks, args.eval_len) for k in ("prose", "code")}

    base = load_original(model, "cpu")
    ref = {k: score(base, c) for k, c in held.items()}
    del base
    gc.collect()
    rows: list[dict[str, Any]] = [{"variant": "bf16 (dequantized Q4_1)", **{
        f"ppl_{k}": round(v[0], 3) for k, v in ref.items()}}]  # fmt: skip
    for method in args.methods:
        for group in args.groups:
            for calib in args.calibs:
                name = f"{method}-g{group}-{calib}"
                dest = args.out / name
                print(f"[{time.strftime('%H:%M:%S')}] {name}", file=sys.stderr, flush=True)
                rec = {"variant": name, "method": method, "group": group, "calib": calib}
                if not dest.exists():
                    rec.update(quantize(model, dest, method, group, data[calib], args))
                if dest.exists():
                    q = load_quantized(dest, "cpu")
                    for k, c in held.items():
                        ppl, top = score(q, c)
                        rec[f"ppl_{k}"] = round(ppl, 3)
                        rec[f"top1_{k}"] = round(top1_agreement(ref[k][1], top) or 0.0, 4)
                    del q
                    gc.collect()
                rows.append(rec)
                (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    tokens = {k: sum(len(c) for c in v) for k, v in held.items()}
    lines = [
        f"held-out tokens: prose {tokens['prose']}, code {tokens['code']}; calibration {args.samples} x "
        f"{args.seqlen} tokens",
        "",
        "| variant | ppl prose | ppl code | top-1 prose | top-1 code | quantize s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['variant']} | refused: {r['error']} | | | | |")
            continue
        t1p = f"{100 * r['top1_prose']:.1f} %" if "top1_prose" in r else "-"
        t1c = f"{100 * r['top1_code']:.1f} %" if "top1_code" in r else "-"
        lines.append(
            f"| {r['variant']} | {r.get('ppl_prose', '-')} | {r.get('ppl_code', '-')} | {t1p} | {t1c} | "
            f"{r.get('seconds_quantize', '-')} |"
        )
    (args.out / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
