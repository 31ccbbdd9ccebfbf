"""Acceptance and server-side counters from Prometheus `/metrics`, scoped to one run by diffing a scrape
taken before it with one taken after it. Parsing is prometheus_client's text parser. LMDeploy
(`lmdeploy:spec_decode_*`, `lmdeploy:generation_tokens_total`, `lmdeploy:request_decode_time_seconds`) and
vLLM (`vllm:spec_decode_*`, `vllm:generation_tokens_total`, `vllm:request_decode_time_seconds`) names are
understood; series that differ only by labels such as `engine` or `model_name` are summed.

LMDeploy's counters lag right after a run (20-25 % short), so the "after" scrape is repeated until two
consecutive scrapes agree (`settled_scrape`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..report.models import Acceptance, ServerCheck

PREFIXES = ("lmdeploy:", "vllm:")


@dataclass
class Scrape:
    """The counters bench uses, summed over engines/models; `per_pos` maps position → accepted tokens."""

    prefix: str | None = None
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None
    per_pos: dict[int, float] = field(default_factory=dict)
    generation_tokens: float | None = None
    decode_time_sum: float | None = None
    decode_time_count: float | None = None
    # The server's own running figures (LMDeploy gauges, cumulative since it started): a cross-check.
    mean_accept_length: float | None = None
    mean_accept_rate: float | None = None
    ok: bool = True
    error: str | None = None

    def key(self) -> tuple[object, ...]:
        return (
            self.drafts, self.draft_tokens, self.accepted, tuple(sorted(self.per_pos.items())),
            self.generation_tokens, self.decode_time_sum, self.decode_time_count,
        )  # fmt: skip


def _add(a: float | None, b: float) -> float:
    return b if a is None else a + b


def parse_metrics(text: str) -> Scrape:
    """The spec-decode and generation counters in a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    s = Scrape()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # prometheus_client raises ValueError/TypeError on malformed text
        return Scrape(ok=False, error=f"unparseable /metrics: {type(e).__name__}: {e}"[:200])
    for fam in families:
        for sample in fam.samples:
            name = sample.name
            prefix = next((p for p in PREFIXES if name.startswith(p)), None)
            if prefix is None:
                continue
            short = name[len(prefix) :]
            v = float(sample.value)
            if short.startswith("spec_decode_") and s.prefix is None:
                s.prefix = prefix
            if short == "spec_decode_num_drafts_total":
                s.drafts = _add(s.drafts, v)
            elif short == "spec_decode_num_draft_tokens_total":
                s.draft_tokens = _add(s.draft_tokens, v)
            elif short == "spec_decode_num_accepted_tokens_total":
                s.accepted = _add(s.accepted, v)
            elif short == "spec_decode_num_accepted_tokens_per_pos_total":
                pos = int(sample.labels.get("position", "0"))
                s.per_pos[pos] = s.per_pos.get(pos, 0.0) + v
            elif short == "generation_tokens_total":
                s.generation_tokens = _add(s.generation_tokens, v)
            elif short == "request_decode_time_seconds_sum":
                s.decode_time_sum = _add(s.decode_time_sum, v)
            elif short == "request_decode_time_seconds_count":
                s.decode_time_count = _add(s.decode_time_count, v)
            elif short == "spec_decode_mean_accept_length":
                s.mean_accept_length = v
            elif short == "spec_decode_mean_accept_rate":
                s.mean_accept_rate = v
    if s.prefix is None:
        s.prefix = next((p for fam in families for p in PREFIXES if fam.name.startswith(p)), None)
    return s


def scrape(url: str, timeout_s: float = 5.0) -> Scrape:
    import httpx

    from ..tls import tls

    try:
        r = httpx.get(url, timeout=timeout_s, verify=tls())
    except httpx.HTTPError as e:
        return Scrape(ok=False, error=f"{url}: {type(e).__name__}")
    if r.status_code != 200:
        return Scrape(ok=False, error=f"{url}: HTTP {r.status_code}")
    return parse_metrics(r.text)


def settled_scrape(
    fetch: Callable[[], Scrape], *, timeout_s: float = 15.0, interval_s: float = 0.25
) -> tuple[Scrape, bool]:
    """Scrape until two consecutive scrapes agree on every counter bench reads; (scrape, settled)."""
    prev = fetch()
    deadline = time.monotonic() + timeout_s
    while True:
        if not prev.ok:
            return prev, False
        if time.monotonic() >= deadline:
            return prev, False
        time.sleep(interval_s)
        cur = fetch()
        if cur.ok and cur.key() == prev.key():
            return cur, True
        prev = cur


def _d(after: float | None, before: float | None) -> float | None:
    if after is None:
        return None
    return after - (before or 0.0)


def acceptance(before: Scrape, after: Scrape, *, settled: bool = True) -> Acceptance | None:
    """Acceptance over the interval between two scrapes; None when the server exports no spec counters or
    drafted nothing in it."""
    drafts = _d(after.drafts, before.drafts)
    draft_tokens = _d(after.draft_tokens, before.draft_tokens)
    accepted = _d(after.accepted, before.accepted)
    if drafts is None or draft_tokens is None or accepted is None or drafts <= 0:
        return None
    positions = sorted(after.per_pos)
    per_pos = [(after.per_pos[p] - before.per_pos.get(p, 0.0)) / drafts for p in positions]
    return Acceptance(
        source=after.prefix or "",
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        acceptance_rate=accepted / draft_tokens if draft_tokens > 0 else None,
        acceptance_length=1.0 + accepted / drafts,
        per_position=per_pos,
        settled=settled,
        server_mean_acceptance_length=after.mean_accept_length,
        server_mean_acceptance_rate=after.mean_accept_rate,
    )


def server_check(before: Scrape, after: Scrape) -> ServerCheck | None:
    """The server's generation tokens and decode time over the interval, and its decode rate counted as the
    client's is: the tokens after each request's first ((generation tokens − requests), the requests from
    the decode-time histogram's count) over the decode time; without that count, generation tokens / time."""
    gen = _d(after.generation_tokens, before.generation_tokens)
    dec = _d(after.decode_time_sum, before.decode_time_sum)
    if gen is None and dec is None:
        return None
    reqs = _d(after.decode_time_count, before.decode_time_count)
    rate = None
    if gen is not None and dec:
        rate = (gen - reqs if reqs is not None and 0 < reqs < gen else gen) / dec
    return ServerCheck(
        generation_tokens=gen, decode_time_s=dec, decode_requests=reqs, server_decode_tokens_per_s=rate
    )
