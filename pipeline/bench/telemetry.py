"""NVML telemetry in a background thread (nvidia-ml-py): per GPU used, every `interval_s` — utilisation,
memory used, power, the total-energy counter (where the GPU has one), SM and memory clocks, temperature,
throttle reasons. On a machine without an NVIDIA GPU the sampler records "unavailable: …" and the
benchmark carries on."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from ..report.models import Telemetry, TelemetrySample

THROTTLE_NAMES = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks",
}  # fmt: skip


def _visible_indices(count: int) -> list[int]:
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is None or vis.strip() == "":
        return list(range(count))
    out = []
    for part in vis.split(","):
        part = part.strip()
        if part.isdigit() and int(part) < count:
            out.append(int(part))
    return out or list(range(count))


class TelemetrySampler:
    """`with TelemetrySampler(0.1) as s: ...; s.result()`."""

    def __init__(self, interval_s: float = 0.1, gpus: list[int] | None = None):
        self.interval_s = interval_s
        self._want = gpus
        self._samples: list[TelemetrySample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._status = "unavailable"
        self._nv: Any = None
        self._handles: list[tuple[int, Any]] = []
        self._energy0: dict[int, float] = {}
        self._t0 = 0.0

    def start(self) -> None:
        try:
            import pynvml as nv
        except ImportError:
            self._status = "unavailable: nvidia-ml-py is not installed"
            return
        try:
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
        except Exception as e:  # NVMLError_LibraryNotFound / DriverNotLoaded
            self._status = f"unavailable: no NVIDIA GPU or driver ({type(e).__name__})"
            return
        if count == 0:
            self._status = "unavailable: NVML sees no GPU"
            return
        self._nv = nv
        idx = self._want if self._want is not None else _visible_indices(count)
        self._handles = [(i, nv.nvmlDeviceGetHandleByIndex(i)) for i in idx]
        self._status = "ok"
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, name="specq-nvml", daemon=True)
        self._thread.start()

    def _q(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:  # a query this GPU or driver does not support
            return None

    def _sample(self) -> None:
        nv = self._nv
        t = time.perf_counter() - self._t0
        for i, h in self._handles:
            util = self._q(nv.nvmlDeviceGetUtilizationRates, h)
            mem = self._q(nv.nvmlDeviceGetMemoryInfo, h)
            power = self._q(nv.nvmlDeviceGetPowerUsage, h)
            energy = self._q(nv.nvmlDeviceGetTotalEnergyConsumption, h)
            if energy is not None:
                self._energy0.setdefault(i, float(energy))
            reasons = self._q(nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)
            self._samples.append(
                TelemetrySample(
                    t=round(t, 4),
                    gpu=i,
                    util_pct=None if util is None else float(util.gpu),
                    mem_used_bytes=None if mem is None else int(mem.used),
                    power_w=None if power is None else power / 1000.0,
                    energy_j=None if energy is None else (float(energy) - self._energy0[i]) / 1000.0,
                    sm_clock_mhz=self._q(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                    mem_clock_mhz=self._q(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
                    temp_c=self._q(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                    throttle_reasons=None if reasons is None else int(reasons),
                )
            )

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)
        self._sample()  # a closing sample so the energy counter covers the whole run

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> TelemetrySampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def result(self, output_tokens: int = 0, accepted_tokens: float | None = None) -> Telemetry:
        return summarize(
            self._status, self.interval_s, [i for i, _ in self._handles], self._samples, output_tokens,
            accepted_tokens,
        )  # fmt: skip


def summarize(
    status: str,
    interval_s: float,
    gpus: list[int],
    samples: list[TelemetrySample],
    output_tokens: int = 0,
    accepted_tokens: float | None = None,
) -> Telemetry:
    tel = Telemetry(status=status, interval_s=interval_s, gpus=gpus, samples=samples)
    if not samples:
        return tel
    utils = [s.util_pct for s in samples if s.util_pct is not None]
    mems = [s.mem_used_bytes for s in samples if s.mem_used_bytes is not None]
    powers = [s.power_w for s in samples if s.power_w is not None]
    tel.util_mean_pct = sum(utils) / len(utils) if utils else None
    tel.mem_peak_bytes = max(mems) if mems else None
    tel.power_mean_w = sum(powers) / len(powers) if powers else None
    tel.power_peak_w = max(powers) if powers else None
    energy = 0.0
    have_counter = True
    for g in gpus:
        es = [s.energy_j for s in samples if s.gpu == g and s.energy_j is not None]
        if not es:
            have_counter = False
            break
        energy += max(es)
    if have_counter and gpus:
        tel.energy_j, tel.energy_source = energy, "counter"
    else:
        total = 0.0
        for g in gpus:
            pts = [(s.t, s.power_w) for s in samples if s.gpu == g and s.power_w is not None]
            total += sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(pts, pts[1:], strict=False))
        if total > 0:
            tel.energy_j, tel.energy_source = total, "power-integral"
    seen = 0
    for s in samples:
        seen |= s.throttle_reasons or 0
    tel.throttle_reasons_seen = [name for bit, name in THROTTLE_NAMES.items() if seen & bit]
    if tel.energy_j is not None and output_tokens:
        tel.joules_per_output_token = tel.energy_j / output_tokens
    if tel.energy_j is not None and accepted_tokens:
        tel.joules_per_accepted_token = tel.energy_j / accepted_tokens
    return tel
