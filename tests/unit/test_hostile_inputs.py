"""tests/hostile_inputs.py, the wide sweep of bad inputs through the real command line (run by hand: some
20 minutes on 2 cores), lists a case for every failure class it guards, those found on 2026-12-04
(classes 19-27) included, and twenty runs of the quantization whose disk fills mid-write."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# class number → what the sweep guards (19, 9/10, 15 and 17 run outside the listed CLI cases)
LISTED = {
    1: "wrong-typed config", 2: "damaged checkpoint", 3: "one-line child failure", 4: "OS errors",
    5: "quantize sizes early", 6: "malformed replies", 7: "bad measurements", 8: "API key", 11: "escapes",
    12: "serve exit codes", 13: "serve stop PID", 14: "stderr noise", 16: "umask", 18: "non-UTF-8 config",
    20: "damaged 4-bit checkpoint", 21: "twin", 22: "session beyond the positions", 23: "one stderr line",
    24: "output path OS errors", 25: "booleans", 26: "refusals before output", 27: "no network",
}  # fmt: skip


def test_the_sweep_lists_cases_for_every_failure_class():
    p = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "hostile_inputs.py"), "--list"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    *cases, tally = p.stdout.splitlines()
    counts: dict[str, int] = {}
    for line in cases:
        klass = re.split(r"\s{2,}", line.strip())[0]
        counts[klass] = counts.get(klass, 0) + 1
    for number, name in LISTED.items():
        assert counts.get(f"{number} {name}", 0) > 0, (number, name, sorted(counts))
    assert sum(counts.values()) >= 300 and "20 disk-filling quantizations" in tally, tally
    assert re.search(r"\+ \d+ embedded-server requests, 1 calibration, disks", tally)
