"""What a speculative step costs on this CPU, per target size: the cost model behind the toy demo pair
(docs/toy.md, "Why the demo pair pays"). Speedup ≈ τ ÷ step cost, where the step cost is a draft+verify step's
time in plain decoding steps of the same loop.

For each target shape (random weights, seeded: a step's cost does not depend on what the weights are) and the
drafter shape, it times, with one torch thread in CPU seconds of that thread (`time.thread_time`: a busy
machine's preemption is not counted, its cache contention still is), with more in wall seconds (a process's
CPU time then counts OpenMP workers spinning):
- one forward of 1 and of k + 1 tokens after a 250-token context;
- the embedded engine's decode loop (`serve/embedded/decode.py`): plain ms/token, and a speculative step at
  each k in plain steps (random drafts are rejected, so every step is a full draft + verify);
- transformers' `generate`: plain ms/token, and an assisted-generation step at k = 4 in plain steps (what the
  embedded engine ran before its own loop).
With `--pair NAME` (a cached toy pair: `small`, `demo`) it also decodes the toy's held-out prompts with the
pair's own weights, plain and at each k, and prints τ, the step cost and the speedup those give (CPU time,
lossless checked); `--served-target DIR` decodes with that checkpoint as the target instead (the demo's
`target-gptq`, loaded as the embedded engine loads it: float32 on CPU).

    python benchmarks/toy_step_cost.py --shape 2x128x384 8x128x384 --pair small demo --threads 1
    python benchmarks/toy_step_cost.py --shape --pair demo --served-target specq-out/demo-*/target-gptq

Prints one JSON object per line."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

CONTEXT = 250
CLOCK = time.thread_time  # time.perf_counter with more than one torch thread (main)


def model(layers: int, hidden: int, mlp: int, vocab: int = 2048, seed: int = 0) -> Any:
    import torch
    from transformers import Qwen3ForCausalLM

    from specq.pipeline.toy.models import ModelSpec, qwen3_config

    torch.manual_seed(seed)
    spec = ModelSpec(hidden, layers, hidden // 64, 2, mlp)
    return Qwen3ForCausalLM(qwen3_config(spec, vocab, eos_token_id=0, pad_token_id=0)).eval()


def forward_ms(m: Any, tokens: int, reps: int = 30) -> float:
    import torch

    ids = torch.randint(5, 2000, (1, CONTEXT), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        cache = m(input_ids=ids, use_cache=True).past_key_values
        x = ids[:, :tokens]
        times = []
        for _ in range(reps):
            t = CLOCK()
            m(input_ids=x, past_key_values=cache, use_cache=True)
            times.append(CLOCK() - t)
            cache.crop(-tokens)
    return 1e3 * sorted(times)[len(times) // 4]


def loop(target: Any, draft: Any, prompt: list[int], k: int, tokens: int) -> tuple[list[int], float, int]:
    """(generated ids, CPU seconds after the prefill, steps) of the embedded engine's loop."""
    from specq.pipeline.serve.embedded.decode import greedy_decode

    marks: list[float] = []
    out = greedy_decode(
        target, prompt, max_new_tokens=tokens, emit=lambda ids: marks.append(CLOCK()),
        draft=draft if k else None, draft_tokens=k,
    )  # fmt: skip
    return out, marks[-1] - marks[0], len(marks) - 1  # the first mark is the prefill's token


def generate_ms(target: Any, draft: Any, prompt: list[int], k: int, tokens: int) -> float:
    """CPU ms per step of transformers' generate (k = 0) or of assisted generation (random drafts: one token
    per step)."""
    import torch

    ids = torch.tensor([prompt])
    kw: dict[str, Any] = {"max_new_tokens": tokens, "min_new_tokens": tokens, "do_sample": False,
                          "attention_mask": torch.ones_like(ids), "pad_token_id": 0}  # fmt: skip
    if k:
        gc = draft.generation_config
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = k, "constant"
        gc.assistant_confidence_threshold = 0.0
        kw["assistant_model"] = draft
    with torch.inference_mode():
        target.generate(ids, **{**kw, "max_new_tokens": 4, "min_new_tokens": 4})
        t = CLOCK()
        target.generate(ids, **kw)
        return 1e3 * (CLOCK() - t) / tokens


def shape_row(spec: str, draft: Any, ks: list[int], tokens: int) -> dict[str, Any]:
    layers, hidden, mlp = (int(x) for x in spec.split("x"))
    target = model(layers, hidden, mlp)
    prompt = list(range(100, 100 + CONTEXT))
    row: dict[str, Any] = {
        "target": spec,
        "params_m": round(sum(p.numel() for p in target.parameters()) / 1e6, 2),
    }
    row["forward_ms"] = {n: round(forward_ms(target, n), 2) for n in (1, max(ks) + 1)}
    loop(target, draft, prompt[:20], max(ks), 4)  # first-call costs
    _, plain_s, plain_steps = loop(target, None, prompt, 0, tokens)
    plain = plain_s / plain_steps
    row["loop_plain_ms"] = round(1e3 * plain, 2)
    costs = {}
    for k in ks:
        _, s, steps = loop(target, draft, prompt, k, tokens)
        costs[k] = round(s / steps / plain, 2)
    row["loop_step_cost"] = costs
    gen = generate_ms(target, draft, prompt, 0, tokens)
    row["generate_plain_ms"] = round(gen, 2)
    row["assisted_step_cost_k4"] = round(generate_ms(target, draft, prompt, 4, tokens) / gen, 2)
    return row


def pair_row(
    name: str, ks: list[int], tokens: int, requests: int, served: str | None = None
) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specq.pipeline.toy import ToyRequest
    from specq.pipeline.toy.build import ToyPair, cache_key, cache_root
    from specq.pipeline.toy.corpus import completion_prompts, load_corpus

    corpus = load_corpus()
    pair = ToyPair.at(cache_root() / cache_key(ToyRequest(size=name).size, 0, corpus.digest))
    if not pair.report.is_file():
        return {"pair": name, "skipped": f"not cached at {pair.root}: run specq toy build OUT --size {name}"}
    tok = AutoTokenizer.from_pretrained(pair.target)
    target = AutoModelForCausalLM.from_pretrained(pair.target).eval()
    if served:
        import torch

        from specq.pipeline.checkpoint import Checkpoint
        from specq.pipeline.engines.embedded import load_quantized

        if Checkpoint(served).quantization is not None:
            target = load_quantized(Path(served), "cpu", torch.float32)
        else:
            target = AutoModelForCausalLM.from_pretrained(served).eval()
    draft = AutoModelForCausalLM.from_pretrained(pair.draft).eval()
    prompts = [tok(p["prompt"])["input_ids"] for p in completion_prompts(corpus, count=requests)]
    loop(target, draft, prompts[0][:20], max(ks), 4)
    totals = {k: [0, 0.0, 0] for k in (0, *ks)}
    lossless = {k: 0 for k in ks}
    for ids in prompts:
        plain_ids = None
        for k in (0, *ks):
            out, s, steps = loop(target, draft, ids, k, tokens)
            if k == 0:
                plain_ids = out
            else:
                lossless[k] += out == plain_ids
            totals[k][0] += len(out) - 1
            totals[k][1] += s
            totals[k][2] += steps
    base_n, base_s, base_steps = totals[0]
    plain_step = base_s / base_steps
    rows = {}
    for k in ks:
        n, s, steps = totals[k]
        tau, cost = n / steps, (s / steps) / plain_step
        speedup = (n / s) / (base_n / base_s)
        rows[k] = {"tau": round(tau, 2), "step_cost": round(cost, 2), "speedup": round(speedup, 2),
                   "lossless": f"{lossless[k]}/{len(prompts)}"}  # fmt: skip
    return {"pair": name, "target": served or str(pair.target), "plain_ms": round(1e3 * plain_step, 2),
            "by_k": rows}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", nargs="*", default=["2x128x384", "8x128x384"], help="LAYERSxHIDDENxMLP")
    ap.add_argument("--draft", default="1x128x128", help="the drafter's LAYERSxHIDDENxMLP")
    ap.add_argument("--pair", nargs="*", default=[], help="cached toy pairs to decode: small, demo")
    ap.add_argument("-k", type=int, nargs="+", default=[2, 3, 4, 5, 6])
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--served-target", help="with one --pair: decode with this target checkpoint instead")
    args = ap.parse_args()

    import os

    import torch

    global CLOCK
    torch.set_num_threads(args.threads)
    CLOCK = time.thread_time if args.threads == 1 else time.perf_counter
    load = os.getloadavg()
    print(
        json.dumps({"threads": args.threads, "loadavg": [round(x, 2) for x in load], "clock": CLOCK.__name__})
    )
    draft = model(*(int(x) for x in args.draft.split("x")), seed=1)
    print(json.dumps({"draft": args.draft, "forward_ms": {1: round(forward_ms(draft, 1), 2)}}), flush=True)
    for spec in args.shape:
        print(json.dumps(shape_row(spec, draft, args.k, args.tokens)), flush=True)
    for name in args.pair:
        print(json.dumps(pair_row(name, args.k, args.tokens, args.requests, args.served_target)), flush=True)
    print(json.dumps({"loadavg_after": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
