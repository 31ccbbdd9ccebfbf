"""Concurrent builders of one cache key serialise on a file lock; the CLI hands its options to the builder."""

from __future__ import annotations

import threading

from specq.pipeline.toy import build as toy_build


def test_second_builder_waits_for_the_first(tmp_path) -> None:
    """The first builder keeps the lock until the second has said it waits (no sleep decides the order)."""
    lock = tmp_path / ".k.lock"
    events: list[str] = []
    held, told = threading.Event(), threading.Event()

    def said(line: str) -> None:
        events.append(line)
        told.set()

    def first() -> None:
        with toy_build._build_lock(lock, events.append):
            held.set()
            assert told.wait(60)
            events.append("first done")

    t = threading.Thread(target=first)
    t.start()
    assert held.wait(60)
    with toy_build._build_lock(lock, said):
        events.append("second in")
    t.join()
    assert events[0].startswith("another process is building")
    assert events[1:] == ["first done", "second in"]


def test_cli_passes_options_to_the_builder(cli, monkeypatch, tmp_path) -> None:
    import specq.pipeline.toy as toy

    seen = {}

    def fake_build(request, progress):
        seen.update(size=request.size, seed=request.seed, force=request.force)
        raise toy_build.InputError("stop here")

    monkeypatch.setattr(toy, "build_toy_pair", fake_build)
    code, _, stderr = cli("toy", "build", str(tmp_path / "o"), "--size", "medium", "--seed", "3", "--force")
    assert code == 2 and "stop here" in stderr
    assert seen == {"size": "medium", "seed": 3, "force": True}
