"""greedy_fast_path.py: the spec-step patch's greedy fast path, cut from the patched
`spec_agent.py`, gives LMDeploy 0.18.0's own target token ids on random CPU batches, and the check notices a
fast path that skips the bad-word and stop-word masks."""

import sys
from pathlib import Path

import greedy_fast_path as check

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "lmdeploy-0.18.0"


def test_the_patched_fast_path_matches_lmdeploys_own_path():
    assert check.mismatches(FIXTURE, cases=300) == 0


def test_a_fast_path_without_the_masks_is_caught(monkeypatch):
    def unmasked(site):
        return lambda m, si, logits, b, n: logits.view(b, n, -1).argmax(dim=-1)

    monkeypatch.setattr(check, "patched_fast_path", unmasked)
    assert check.mismatches(FIXTURE, cases=40) > 0


def test_the_check_leaves_sys_modules_as_it_found_them():
    before = {name: sys.modules.get(name) for name in check.STUBS}
    check.load(FIXTURE)
    assert {name: sys.modules.get(name) for name in check.STUBS} == before
