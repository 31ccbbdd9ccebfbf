"""The README's exit-code table and `specq.pipeline.errors.EXIT_CODES` list the same codes."""

from __future__ import annotations

import re
from pathlib import Path

from specq.pipeline.errors import EXIT_CODES


def test_readme_lists_every_exit_code() -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Exit codes", 1)[1].split("\n\n", 2)[1]
    codes = {int(c) for row in table.splitlines()[2:] for c in re.findall(r"\d+", row.split("|")[1])}
    assert codes == set(EXIT_CODES)
