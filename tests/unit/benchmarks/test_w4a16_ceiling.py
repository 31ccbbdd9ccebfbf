"""The w4a16-ceiling scenario: its read-only probe walks the W4A16 kernel's splits and reads every word once
(Triton's interpreter, in a child process so that the interpreter mode stays out of this one), and its report
from injected figures. Its GPU run is recorded in docs/w4a16.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from benchmarks.scenarios import w4a16_ceiling as C

CHILD = textwrap.dedent(
    """
    import json, os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from specq.pipeline.kernels import w4a16 as W
    from benchmarks.scenarios import w4a16_ceiling as C
    torch.manual_seed(0)
    k, n, group = 640, 80, 128  # 5 groups; 80 columns: a ragged last block of 64
    q = torch.randint(0, 16, (k, n), dtype=torch.uint8)
    z = torch.randint(0, 16, (k // group, n), dtype=torch.uint8)
    p = W.pack(W.pack_awq(q), W.pack_awq(z), torch.rand(k // group, n).bfloat16(), W.ORDER_WGMMA)
    words = p.qweight  # [groups, N, group / 8]
    out = {}
    for split, gpi in ((1, 1), (1, 2), (2, 2), (3, 1), (5, 4)):
        got = C.probe(p, split, 64, 4, gpi, False)
        per = -(-words.shape[0] // split)
        want = []
        for s in range(split):
            part = words[s * per : min((s + 1) * per, words.shape[0])]
            acc = torch.zeros(n, dtype=torch.int32)
            for g in range(part.shape[0]):
                for w in range(part.shape[2]):
                    acc ^= part[g, :, w]
            want.append(acc)
        out[f"{split}-{gpi}"] = bool(torch.equal(got, torch.stack(want)))
    # one word changed in the last group: the last split's XOR of that column changes, no other
    words[-1, 3, 0] ^= 1 << 7
    again = C.probe(p, 2, 64, 4, 2, False)
    out["one-word"] = [int(v) for v in (again != C.probe(p, 2, 64, 4, 2, False)).sum(1)]
    words[-1, 3, 0] ^= 1 << 7
    out["changed"] = [int(v) for v in (again != C.probe(p, 2, 64, 4, 2, False)).sum(1)]
    print(json.dumps(out))
    """
)


def test_the_probe_reads_every_word_of_each_split_once() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    assert all(res[key] for key in ("1-1", "1-2", "2-2", "3-1", "5-4")), res
    assert res["one-word"] == [0, 0], res  # the same words twice: the same XORs
    assert res["changed"] == [0, 1], res  # column 3 of the second split, and nothing else


def test_the_report_gives_each_launch_its_time_and_rate() -> None:
    result = {
        "gpu": "GPU",
        "l2_mb": 50.0,
        "date": "2026-12-07",
        "shapes": {
            "gate_up": {
                "n": 34816,
                "k": 5120,
                "bytes": 92_835_840,
                "config": "n64-s4-w4-st1-p0-g2-r96",
                "us": {"kernel (shipped)": 38.0, "probe: words": 24.0},
            }
        },
    }
    md = C.table(result)
    assert "L2: 50 MiB." in md
    assert "gate_up (34816×5120, 92.8 MB), shipped configuration n64-s4-w4-st1-p0-g2-r96" in md
    assert "| kernel (shipped) | 38.00 | 2.44 |" in md and "| probe: words | 24.00 | 3.87 |" in md
