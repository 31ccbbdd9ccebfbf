"""Keeping backends quiet and observable: their own logs and progress bars (several print to stdout, which
must stay clean for `--json`) go to a log file at the file-descriptor level, and per-layer progress comes from
forward pre-hooks on the decoder layers, which every layer-by-layer quantizer calls in order."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .backends import LayerHook


class OutputCapture:
    """While active, fd 1/2 and sys.stdout/sys.stderr go to a log file; `passthrough()` briefly restores
    them so specq's own progress lines still reach the user."""

    def __init__(self) -> None:
        self.saved: list[tuple[int, int]] = []
        self.log_fd: int | None = None
        self.py_streams: tuple[Any, Any] = (sys.stdout, sys.stderr)
        self.text: Any = None

    def _to_log(self) -> None:
        for fd, _ in self.saved:
            assert self.log_fd is not None
            os.dup2(self.log_fd, fd)
        sys.stdout = sys.stderr = self.text

    def _to_user(self) -> None:
        for fd, copy in self.saved:
            os.dup2(copy, fd)
        sys.stdout, sys.stderr = self.py_streams

    @contextlib.contextmanager
    def passthrough(self) -> Iterator[None]:
        if self.text is None:
            yield
            return
        self.text.flush()
        self._to_user()
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            self._to_log()


@contextlib.contextmanager
def backend_output_to(log_path: Path) -> Iterator[OutputCapture]:
    """Send everything written to fd 1 and 2 (and Python's sys.stdout/sys.stderr) to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    cap = OutputCapture()
    log = open(log_path, "ab")  # noqa: SIM115 - closed below, after the user's streams are back
    text = open(log_path, "a", encoding="utf-8", errors="replace", buffering=1)  # noqa: SIM115
    cap.log_fd, cap.text = log.fileno(), text
    for fd in (1, 2):
        try:
            cap.saved.append((fd, os.dup(fd)))
        except OSError:  # no such descriptor (embedded interpreters): nothing to redirect
            pass
    try:
        cap._to_log()
        yield cap
    finally:
        # The user's streams come back first, whatever the log's state. On a full disk the log's last
        # flush fails with ENOSPC; raised before the restore (as it was), it left sys.stderr on the closed
        # log, so the one error line was lost and the process exited 1 in silence. The log is a
        # diagnostic: what it cannot hold is dropped, and the fault is reported by the write it hit first.
        with contextlib.suppress(OSError, ValueError):
            text.flush()
        cap._to_user()
        for _, copy in cap.saved:
            os.close(copy)
        _rebind_log_handlers(text, sys.stderr)
        cap.text = None
        for f in (text, log):
            with contextlib.suppress(OSError, ValueError):
                f.close()


def _rebind_log_handlers(old: Any, new: Any) -> None:
    """Backends imported during the capture (gptqmodel, its helpers) attach logging handlers to the
    sys.stderr of that moment, the log file about to be closed; point them back at the real stderr so
    later log records do not fail with 'I/O operation on closed file'."""
    loggers = [
        logging.getLogger(),
        *(lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)),
    ]
    for lg in loggers:
        for h in lg.handlers:
            if isinstance(h, logging.StreamHandler) and h.stream is old:
                h.setStream(new)


def decoder_layers(model: Any) -> list[Any]:
    """The decoder-layer list of a transformers causal LM (`model.model.layers` and common variants)."""
    for path in ("model.layers", "model.language_model.layers", "transformer.h", "model.decoder.layers"):
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is not None:
            try:
                return list(obj)
            except TypeError:
                continue
    return []


def hook_layers(model: Any, on_layer: LayerHook) -> list[Any]:
    """Call `on_layer(i, n)` the first time decoder layer i runs; returns the hook handles."""
    layers = decoder_layers(model)
    seen: set[int] = set()
    handles = []

    def make(index: int) -> Any:
        def hook(module: Any, args: Any) -> None:
            if index not in seen:
                seen.add(index)
                on_layer(index + 1, len(layers))

        return hook

    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(make(i)))
    return handles
