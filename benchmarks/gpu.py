"""The GPU scenarios' one runner: `python benchmarks/gpu.py NAME [OPTIONS]` runs scenario NAME
(`benchmarks/scenarios/`), `python benchmarks/gpu.py` lists them. Run it from a checkout with specq
installed (`make install-gpu`); a scenario's `--help` lists its options and what it writes."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

# The scenarios are modules of this checkout (`benchmarks.scenarios`), and one reuses a test helper.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.scenarios import SCENARIOS  # noqa: E402


def usage() -> str:
    width = max(map(len, SCENARIOS))
    rows = [f"  {name:{width}}  {summary}" for name, (_, summary) in SCENARIOS.items()]
    return "usage: python benchmarks/gpu.py NAME [OPTIONS]   (NAME --help: its options)\n\n" + "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "--list"):
        print(usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in SCENARIOS:
        print(f"gpu.py: unknown scenario '{name}'\n\n{usage()}", file=sys.stderr)
        return 2
    os.environ.setdefault("PYTHONUNBUFFERED", "1")  # a detached run's log shows each step as it ends
    module = importlib.import_module(f"benchmarks.scenarios.{SCENARIOS[name][0]}")
    sys.argv[0] = f"benchmarks/gpu.py {name}"  # argparse's usage line names the command to type
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
