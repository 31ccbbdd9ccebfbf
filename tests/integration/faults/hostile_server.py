"""The scripted fake OpenAI server of the fault tests: it lives in `tests/fake_openai.py` with the
synthetic one; these names stay importable from here."""

from __future__ import annotations

try:
    from tests.fake_openai import OK_MODELS, Behaviour, chunk, good_stream, hostile_server
except ModuleNotFoundError:  # imported by its path (benchmarks/hostile_inputs.py), not from the checkout root
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from tests.fake_openai import OK_MODELS, Behaviour, chunk, good_stream, hostile_server

__all__ = ["OK_MODELS", "Behaviour", "chunk", "good_stream", "hostile_server"]
