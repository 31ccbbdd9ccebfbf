"""Wall-clock speedup of DFlash speculative decoding over plain greedy decoding on the CPU, for any target
`specq draft train` accepts (a Llama target such as SmolLM2 included), with a lossless check.

Neither serving engine can run this pairing (LMDeploy 0.18's DFlash is `qwen3_dflash`; the embedded engine
speculates only with plain draft models), so this script is the decode loop itself, in transformers: the
target prefills the prompt with a KV cache; each step the drafter drafts `k` tokens from the target's
hidden states at its `target_layer_ids` (one block, `[last token, MASK x (B - 1)]`, as in training and
`specq draft eval`), the target verifies `[last token, d1..dk]` in one forward, the longest prefix equal
to the target's greedy tokens is kept plus the target's own next token, and the cache is cropped to what
was kept. Plain decoding is the same loop with k = 0 (one token per forward, same cache). Greedy: the
speculative output must equal the plain one token for token ("lossless"); a mismatch is counted, not hidden.

    python benchmarks/dflash_cpu_speedup.py TARGET DRAFT --suite chat code --requests 4 --max-tokens 64 -k 3

Prints one JSON object: per suite and k, tokens/s plain and speculative, the speedup, tokens per step (τ),
and how many requests were lossless."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any


def load(target: Path, draft: Path, dtype: str) -> tuple[Any, Any, Any, dict[str, Any]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specq.pipeline.checkpoint import Checkpoint
    from specq.pipeline.draft.eval import load_drafter

    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=getattr(torch, dtype)).eval()
    tok = AutoTokenizer.from_pretrained(str(target))
    drafter, cfg = load_drafter(Checkpoint(draft), "cpu")
    return model, tok, drafter.to(getattr(torch, dtype)).eval(), cfg


def decode(model: Any, drafter: Any, cfg: dict[str, Any], prompt: list[int], max_tokens: int, k: int) -> dict:
    """Greedy decoding of `max_tokens` tokens; k = 0 is plain decoding."""
    import torch
    from transformers import DynamicCache

    from specq.pipeline.draft.model import block_mask, query_block

    dc = cfg["dflash_config"]
    layer_ids, block, mask_id = list(dc["target_layer_ids"]), int(dc["block_size"]), int(dc["mask_token_id"])
    embed, lm_head = model.get_input_embeddings(), model.get_output_embeddings()
    e = model.generation_config.eos_token_id
    eos = {e} if isinstance(e, int) else set(e or [])
    cache = DynamicCache()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([prompt]), past_key_values=cache, use_cache=True,
                    output_hidden_states=k > 0)  # fmt: skip
        feats = torch.cat([out.hidden_states[j + 1] for j in layer_ids], -1)[0] if k > 0 else None
        last = int(out.logits[0, -1].argmax())
        seq = list(prompt)
        generated: list[int] = []
        steps = 0
        while len(generated) < max_tokens and last not in eos:
            drafts: list[int] = []
            if k > 0:
                assert feats is not None
                p = len(seq)  # the anchor's position: `last` is not in the cache yet
                ctx = torch.cat([feats, feats.new_zeros(1, feats.shape[1])])[None]  # row p is masked out
                anchor = torch.tensor([[p]])
                q_ids, q_pos = query_block(torch.tensor([[*seq, last]]), anchor, block, mask_id)
                ctx_pos = torch.arange(p + 1)[None]
                hidden = drafter(ctx, ctx_pos, embed(q_ids), q_pos, block_mask(p + 1, anchor, block))
                # as specq.pipeline.draft.model.draft_logits, with the lm_head on the k slots used only
                drafts = lm_head(hidden[0, 1 : k + 1]).argmax(-1).tolist()
            ids = torch.tensor([[last, *drafts]])
            out = model(input_ids=ids, past_key_values=cache, use_cache=True, output_hidden_states=k > 0)
            greedy = out.logits[0].argmax(-1).tolist()
            n = 0
            while n < len(drafts) and drafts[n] == greedy[n]:
                n += 1
            kept = [last, *drafts[:n]]
            seq += kept
            generated += kept
            if k > 0:
                new = torch.cat([out.hidden_states[j + 1] for j in layer_ids], -1)[0, : n + 1]
                feats = torch.cat([feats, new])
            cache.crop(len(seq))
            last = greedy[n]
            steps += 1
    seconds = time.perf_counter() - t0
    generated = generated[:max_tokens]
    return {"tokens": generated, "seconds": seconds, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", type=Path)
    ap.add_argument("draft", type=Path)
    ap.add_argument("--suite", nargs="+", default=["chat", "code"])
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("-k", type=int, nargs="+", default=[3])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from specq.pipeline.workload import load_suite

    model, tok, drafter, cfg = load(args.target, args.draft, args.dtype)
    decode(model, drafter, cfg, tok("warm up")["input_ids"], 4, max(args.k))  # first-call costs
    report: dict[str, Any] = {"target": str(args.target), "draft": str(args.draft), "threads": args.threads,
                              "dtype": args.dtype, "max_tokens": args.max_tokens, "suites": {}}  # fmt: skip
    for suite in args.suite:
        chats = [p.as_messages() for p in load_suite(suite)[: args.requests]]
        prompts = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in chats]
        prompts = [tok(text, add_special_tokens=False)["input_ids"] for text in prompts]
        # each prompt plain and then at every k, so a shared machine's load changes hit all alike
        runs = [
            {k: decode(model, drafter, cfg, ids, args.max_tokens, k) for k in (0, *args.k)} for ids in prompts
        ]
        plain = [r[0] for r in runs]
        plain_tokens = sum(len(r["tokens"]) for r in plain)
        plain_s = sum(r["seconds"] for r in plain)
        rows = {}
        for k in args.k:
            spec = [r[k] for r in runs]
            spec_s = sum(r["seconds"] for r in spec)
            lossless = sum(a["tokens"] == b["tokens"] for a, b in zip(plain, spec, strict=True))
            tokens = sum(len(r["tokens"]) for r in spec)
            rows[k] = {
                "tokens_per_s_plain": round(plain_tokens / plain_s, 2),
                "tokens_per_s_spec": round(tokens / spec_s, 2),
                "speedup": round((tokens / spec_s) / (plain_tokens / plain_s), 3),
                "tau": round(tokens / max(1, sum(r["steps"] for r in spec)), 3),
                "lossless": f"{lossless}/{len(prompts)}",
            }
            print(json.dumps({suite: {k: rows[k]}}), flush=True)
        report["suites"][suite] = {"requests": len(prompts), "tokens": plain_tokens, "by_k": rows}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
