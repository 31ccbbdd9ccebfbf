"""How fast and how exact is specq's streaming client? Runs the client against the synthetic server
(`tests/fake_openai.py`), which streams chunks on a known, fixed, absolute schedule, and prints
the client's aggregate streamed tokens/s and its error in per-request decode tokens/s and mean per-token
ITL. The truth is the server's own send time of every chunk (it stamps them, `--stamp`, on the same
monotonic clock): that isolates the client's error from the server's scheduling jitter on a loaded
machine. The error against the nominal schedule is printed too. Target: >= 20,000 streamed
tokens/s on 2 CPU cores, < 1 % error.

    python -m benchmarks.bench_client_throughput [--concurrency 8] [--tokens-per-chunk 4] [--step-ms 1]

(from the checkout root: the fake server is a test helper, tests/fake_openai.py)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics

from specq.pipeline.bench.analysis import aggregate
from specq.pipeline.bench.client import RequestSpec, per_token_latencies, run_requests
from specq.pipeline.workload import build_workload
from tests.fake_openai import start_server, stop_server


def _err(meas: list[float], true: list[float]) -> float:
    return statistics.fmean(abs(m - t) / t for m, t in zip(meas, true, strict=True))


def trial(args: argparse.Namespace) -> dict[str, float]:
    step = args.step_ms / 1000
    proc, url = start_server(
        "--k", str(args.k), "--tokens-per-chunk", str(args.tokens_per_chunk), "--step-s", str(step),
        "--ttft-s", "0.005", "--stamp",
    )  # fmt: skip
    try:
        w = build_workload(
            suite="mixed", prompts_file=None, dataset=None, field="prompt", requests=args.requests
        )
        spec = RequestSpec(mode="chat", model="synthetic", max_tokens=args.max_tokens, temperature=0.0)
        asyncio.run(run_requests(url, spec, w.prompts[:2], concurrency=2))  # warm-up
        records, wall = asyncio.run(run_requests(url, spec, w.prompts, concurrency=args.concurrency))
    finally:
        stop_server(proc)
    agg = aggregate(records, wall)
    assert agg.errors == 0, [r.error for r in records if not r.ok][:3]
    true_itl, meas_itl, true_rate, meas_rate, sched_itl = [], [], [], [], []
    for r in records:
        assert r.server_chunk_times is not None, "the synthetic server did not stamp its chunks"
        itl, tpot = per_token_latencies(r.chunk_times, r.chunk_tokens)
        s_itl, s_tpot = per_token_latencies(r.server_chunk_times, r.chunk_tokens)
        assert tpot and s_tpot
        true_itl.append(statistics.fmean(s_itl))
        meas_itl.append(statistics.fmean(itl))
        true_rate.append(1 / s_tpot)
        meas_rate.append(1 / tpot)
        sched_itl.append(step * (len(r.chunk_times) - 1) / (sum(r.chunk_tokens) - r.chunk_tokens[0]))
    res = {
        "streamed tok/s": agg.output_tokens_per_s or 0.0,
        "decode tok/s error %": 100 * _err(meas_rate, true_rate),
        "ITL error %": 100 * _err(meas_itl, true_itl),
        "ITL error vs schedule %": 100 * _err(meas_itl, sched_itl),
    }
    print(
        f"  streamed output tokens: {agg.output_tokens} in {wall:.2f} s -> {res['streamed tok/s']:,.0f} tok/s"
    )
    print(
        f"  per-request decode tok/s: server-stamped {statistics.fmean(true_rate):,.1f}, measured "
        f"{statistics.fmean(meas_rate):,.1f}, mean abs error {res['decode tok/s error %']:.3f} %"
    )
    print(
        f"  mean per-token ITL: server-stamped {statistics.fmean(true_itl) * 1e3:.4f} ms, measured "
        f"{statistics.fmean(meas_itl) * 1e3:.4f} ms, mean abs error {res['ITL error %']:.3f} %"
    )
    print(
        f"  vs the nominal schedule ({statistics.fmean(sched_itl) * 1e3:.4f} ms): mean abs error "
        f"{res['ITL error vs schedule %']:.3f} % (includes the server's own lateness under load)"
    )
    print(f"  tokens/chunk (client): {agg.tokens_per_chunk:.3f}; token source: {agg.chunk_token_sources}")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--tokens-per-chunk", type=int, default=4, help="k = 0: tokens in every chunk")
    ap.add_argument("--k", type=int, default=0, help="> 0: chunks of accepted+1 tokens (pattern 2,1,3,0)")
    ap.add_argument("--step-ms", type=float, default=1.0, help="time between chunks")
    ap.add_argument("--trials", type=int, default=3, help="independent runs; the median is the summary")
    args = ap.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"cpu cores visible: {os.cpu_count()}, load average {load:.1f}; concurrency {args.concurrency}, "
        f"{args.requests} requests x {args.max_tokens} tokens; chunk every {args.step_ms:g} ms, "
        + (f"k={args.k} (1-{args.k + 1} tokens/chunk)" if args.k else f"{args.tokens_per_chunk} tokens/chunk")
    )
    results = []
    for i in range(args.trials):
        print(f"trial {i + 1}/{args.trials}")
        results.append(trial(args))
    print("median over trials: " + "; ".join(
        f"{k} {statistics.median(r[k] for r in results):.4g}" for k in results[0]
    ))  # fmt: skip


if __name__ == "__main__":
    main()
