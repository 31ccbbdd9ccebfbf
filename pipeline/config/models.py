"""Typed settings for every stage. A TOML (or tutorial-style INI) file has one table per section:
`[model] [engine] [speculative] [generation]` (shared by serve and bench, shaped like the user's
`speculative_config.ini`), and `[quantize] [convert] [bench] [plan] [draft]`. Every model forbids unknown keys
so a typo is an error, never silently ignored.

A setting that is also a command-line option is declared here once: its description is the option's help,
its default and bounds the option's, and `flag(...)` says how the option is spelled where that is not
`--` + the key with dashes (cli/_fields.py builds the options from these fields)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator

from ..engines.speculation import EMBEDDED_METHODS, LMDEPLOY_METHODS, MAX_DRAFT_TOKENS

SPECULATIVE_METHODS = (*LMDEPLOY_METHODS, *EMBEDDED_METHODS)
Method = Literal["dflash", "eagle3", "eagle", "qwen3_5_mtp", "deepseek_mtp", "hy3_mtp", "draft"]


# A setting that is on or off takes a boolean and nothing else: TOML's true/false, or an INI or environment
# value of true/false/yes/no/on/off (the loader reads those as booleans); a TOML string "yes" is refused, as
# "maybe" is, rather than taken for true because pydantic would coerce it.
Bool = Annotated[bool, Strict()]


def flag(
    *names: str,
    text: bool = False,
    path: bool = False,
    choices: bool | Sequence[str] = False,
    checked: bool = False,
) -> dict[str, Any]:
    """A field's command-line spelling (`"--timeout"`, `"--draft-tokens", "-k"`, `"--eval/--no-eval"`) and
    how the command line reads it: `text` (the config parses it), `path`, `choices` (listed by the command
    line, which refuses others: a Literal's values, or the values given), `checked` (the command line also
    checks the field's bounds)."""
    cli: dict[str, Any] = {"names": list(names)} if names else {}
    cli.update({k: True for k, on in (("text", text), ("path", path), ("checked", checked)) if on})
    if choices:
        cli["choices"] = list(choices) if not isinstance(choices, bool) else True
    return {"cli": cli}


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSection(Section):
    """Which checkpoints to serve. `draft_model_path` and the draft-token count sit here as in the tutorial,
    whose key for the count, `num_draft_tokens`, is the one a config file uses (and `config show` prints);
    in code it is `draft_tokens`, as everywhere else."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True)

    model_path: str | None = None
    model_name: str | None = Field(None, description="Name announced at /v1/models.")
    draft_model_path: str | None = Field(
        None,
        description="Drafter directory (DFlash, EAGLE or a small draft model).",
        json_schema_extra=flag("--draft-model", path=True),
    )
    draft_tokens: int = Field(
        0,
        ge=0,
        le=MAX_DRAFT_TOKENS,
        alias="num_draft_tokens",
        description="Draft tokens per step K, 0..15 (0 = no speculation; DFlash: up to block size - 1).",
        json_schema_extra=flag("--draft-tokens", "-k", text=True),
    )
    trust_remote_code: Bool = False


class EngineSection(Section):
    engine: Literal["lmdeploy", "embedded", "auto"] = Field(
        "auto", description="The server to start: lmdeploy | embedded | auto."
    )
    backend: Literal["turbomind", "pytorch", "auto"] = Field(
        "auto", description="LMDeploy backend: turbomind | pytorch | auto."
    )
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int | None = Field(None, ge=1, le=65535, description="Port (default: a free one).")
    max_batch_size: int = Field(
        1, ge=1, description="Sequences decoded together (LMDeploy --max-batch-size)."
    )
    cache_max_entry_count: float = Field(
        0.8, gt=0, le=1, description="LMDeploy KV-cache share of free memory."
    )
    enable_prefix_caching: Bool = Field(
        False,
        description="LMDeploy prefix cache.",
        json_schema_extra=flag("--enable-prefix-caching/--no-prefix-caching"),
    )
    session_len: int | None = Field(None, ge=64, description="LMDeploy session length.")
    max_prefill_token_num: int | None = Field(
        None, ge=64, description="LMDeploy --max-prefill-token-num; default: plan.max_prefill_token_num"
    )
    tp: int = Field(
        1,
        ge=1,
        description="LMDeploy tensor parallelism: shard the model over N GPUs of this host.",
        json_schema_extra=flag(checked=True),
    )
    distributed_executor_backend: Literal["mp", "ray"] | None = Field(
        None, description="LMDeploy PyTorch engine's workers for --tp > 1: ray (LMDeploy's default) | mp."
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Embedded engine: auto | cpu | cuda.")
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = Field(
        "auto", description="auto | float16 | bfloat16 | float32."
    )
    eager_mode: Bool = False
    step_patch: Bool = Field(
        False,
        description="LMDeploy PyTorch engine: apply specq's spec-step patch (less host work a speculative "
        "step; lmdeploy 0.18.0 only; docs/step-cost.md)",
    )
    w4a16_kernel: Literal["auto", "specq", "lmdeploy", "turbomind"] = Field(
        "auto",
        description="LMDeploy PyTorch engine, 4-bit AWQ linears: specq's deterministic kernel (lmdeploy "
        "0.18.0; auto: specq where it applies), LMDeploy's Triton kernel, or TurboMind's (fp16); "
        "docs/w4a16.md",
    )
    logprobs_mode: Literal["raw_logprobs", "raw_logits"] | None = Field(
        None,
        description="LMDeploy PyTorch engine --logprobs-mode: without it a request for logprobs is HTTP 400; "
        "bench sets raw_logprobs on the baselines its lossless check scores",
    )
    ready_timeout_s: float = Field(600.0, gt=0)
    max_queue: int = Field(64, ge=1, description="embedded engine: waiting requests before 429")
    api_keys_env: str | None = Field(None, description="Environment variable holding the API key(s).")
    api_keys_file: str | None = Field(None, description="File with one API key a line.")


class SpeculativeSection(Section):
    method: Method | None = Field(
        None,
        description="Speculative method (default: detected from the drafter).",
        json_schema_extra=flag(choices=True),
    )
    dflash_block_size: int | None = Field(None, ge=2)


class GenerationSection(Section):
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    repetition_penalty: float = Field(1.0, gt=0)
    max_new_tokens: int = Field(256, ge=1)


class QuantizeSection(Section):
    """`specq quantize`. Unset `method`/`sym` are resolved by the stage: AWQ for `for = "speculative"` (the
    PyTorch engine, the only one that speculates, refuses GPTQ), GPTQ for `"plain"`; GPTQ symmetric, AWQ with
    zero points, as TurboMind expects."""

    model: str | None = None
    method: Literal["gptq", "awq"] | None = Field(
        None,
        description="Quantization method: gptq | awq (default: awq --for speculative, gptq --for plain).",
    )
    bits: Literal[2, 3, 4, 8] = Field(4, description="Weight bits (TurboMind: 4).")
    group_size: int = Field(
        128,
        description="Columns per quantization group, -1: one group per row (TurboMind: 128; others need "
        "--no-turbomind-check).",
    )
    sym: Bool | None = Field(
        None,
        description="Symmetric (GPTQ default) or with zero points (AWQ default).",
        json_schema_extra=flag("--sym/--asym"),
    )
    desc_act: Bool = Field(
        False,
        description="GPTQ act-order (TurboMind: off).",
        json_schema_extra=flag("--desc-act/--no-desc-act"),
    )
    calib: str | None = Field(
        None,
        description="Calibration: FILE (.jsonl .json .parquet .csv .txt), DIR, or hub NAME[:CONFIG[:SPLIT]].",
    )
    text_field: str = Field(
        "text", description="Text column of the calibration data (chat 'messages' is rendered)."
    )
    samples: int = Field(128, ge=1, description="Calibration samples.")
    seqlen: int = Field(512, ge=16, description="Tokens per sample; short texts are packed.")
    seed: int = Field(0, description="Shuffle seed for the calibration texts.")
    backend: str | None = Field(
        None,
        description="Quantization backend: gptqmodel (default) | llmcompressor | autoawq | lmdeploy.",
        json_schema_extra=flag("--quant-backend"),
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto | cpu | cuda.")
    out: str | None = None
    turbomind_check: Bool = Field(
        True,
        description="Refuse settings TurboMind rejects.",
        json_schema_extra=flag("--turbomind-check/--no-turbomind-check"),
    )
    target: Literal["speculative", "plain"] = Field(
        "speculative",
        alias="for",
        description="speculative: a checkpoint the PyTorch engine speculates with | plain.",
        json_schema_extra=flag("--for"),
    )
    evaluate: Bool = Field(
        True,
        description="Perplexity and logits cosine, original vs quantized.",
        json_schema_extra=flag("--eval/--no-eval"),
    )
    eval_samples: int = Field(8, ge=1, description="Held-out samples of --seqlen tokens for perplexity.")
    repack: Bool = Field(True, description="GPTQ for speculative use: repack it to AWQ (lossless)")
    target_model: str | None = Field(
        None,
        description="MODEL is a DFlash drafter: the target whose hidden states calibrate it (GPTQ); "
        "without it, round-to-nearest.",
        json_schema_extra=flag(path=True),
    )

    @field_validator("group_size")
    @classmethod
    def _group_size(cls, v: int) -> int:
        if v == 0 or v < -1:
            raise ValueError(f"must be a positive number of columns (e.g. 128) or -1 for whole rows, not {v}")
        return v

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True)


class ConvertSection(Section):
    """`specq convert`: a readiness check by default; `to` repacks a GPTQ target, `dtype` casts a drafter."""

    to: Literal["awq"] | None = Field(
        None, description="Repack a symmetric 4-bit GPTQ checkpoint as AWQ gemm: awq."
    )
    dtype: Literal["float16", "bfloat16"] | None = Field(
        None, description="Cast MODEL's weights (a copy): float16 or bfloat16."
    )
    out: str | None = Field(
        None, description="output directory for `to`/`dtype`; default MODEL-awq / MODEL-fp16"
    )
    engine_check: Bool = Field(
        False, description="Also run LMDeploy's own TurboMind checks (needs its _turbomind module)."
    )


def parse_int_list(value: object) -> object:
    """`3..6` → [3, 4, 5, 6]; `3,4,6` → [3, 4, 6]; `5` → [5]; lists pass through."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if not isinstance(value, str):
        return value
    out: list[int] = []
    for part in value.replace(" ", "").split(","):
        if not part:
            continue
        try:
            if ".." in part:
                lo, hi = (int(x) for x in part.split("..", 1))
                if hi < lo:
                    raise ValueError(f"empty range '{part}'")
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise ValueError(f"expected integers like 3..6 or 3,4,6, got '{value}'") from None
    return sorted(set(out))


def int_ranges(values: list[int]) -> str:
    """[3, 4, 5, 9] → '3..5,9': a list of integers as the ranges a user would type."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(str(a) if a == b else f"{a}..{b}" for a, b in runs)


def parse_fraction(value: object) -> object:
    """`5%` → 0.05; `0.05` → 0.05."""
    if isinstance(value, str):
        v = value.strip()
        try:
            return float(v[:-1]) / 100 if v.endswith("%") else float(v)
        except ValueError:
            raise ValueError(
                f"expected a fraction like 0.05 or a percentage like 5%, got '{value}'"
            ) from None
    return value


def check_url(url: str) -> str:
    """An http(s) URL with a host and, when given, a port in 1..65535 (what `--url` must be)."""
    from urllib.parse import urlsplit

    if any(ord(c) < 32 or c.isspace() for c in url):
        raise ValueError("must be an http:// or https:// URL without spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise ValueError(f"not a usable URL ({e}); e.g. http://127.0.0.1:23333") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:23333")
    if port == 0:
        raise ValueError("port 0 is not a server's port; e.g. http://127.0.0.1:23333")
    return url


BaselineEngine = Literal["same", "turbomind", "pytorch", "embedded"]


class BenchSection(Section):
    url: str | None = Field(None, description="Benchmark this running server (one run).")
    served_model_name: str | None = Field(
        None, description="Model name at --url (default: first).", json_schema_extra=flag("--model")
    )
    draft_tokens: list[int] | None = Field(
        None,
        description="Draft-token counts to sweep: 3..6 or 3,4,6 "
        "(default 3..6; DFlash: up to block size - 1).",
        json_schema_extra=flag("--draft-tokens", "-k"),
    )
    baseline: Bool = True
    baseline_engine: list[BaselineEngine] = Field(
        default_factory=lambda: ["same"],  # type: ignore[arg-type]
        description="Engine(s) of the k = 0 baseline: same | turbomind | pytorch | embedded (comma list).",
    )
    suite: str | None = Field("mixed", description="Built-in suite: code, math, chat, ... or mixed.")
    prompts: str | None = Field(None, description="JSONL with prompt or messages per line.")
    dataset: str | None = Field(None, description="datasets name or local file/dir.")
    field: str = Field("prompt", description="Dataset field holding the prompt.")
    requests: int = Field(16, ge=1, description="Requests per run.")
    max_tokens: int = Field(128, ge=1, description="Output tokens per request.")
    concurrency: list[int] = Field(default_factory=lambda: [1], description="In-flight requests, e.g. 1,4,8.")
    warmup: int | None = Field(
        None, ge=0, description="Prompts per warm-up pass: N, all (default: every prompt once) or 0 (off)."
    )
    warmup_passes: int = Field(5, ge=1, description="At most N passes to reach steady state.")
    warmup_tolerance: float = Field(
        0.05,
        gt=0,
        le=1,
        description="Steady: a pass at most e.g. 5% faster than the last.",
    )
    trials: int | None = Field(None, ge=1, description="Measured trials per run (default 3; 1 with --url).")
    consistency_tolerance: float = Field(
        0.10, gt=0, le=1, description="Flag client vs server beyond, e.g. 10%."
    )
    repeats: int = Field(1, ge=1, description="Times each prompt is sent.")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature (0: greedy).")
    near_tie_margin: float = Field(
        0.25, ge=0,
        description="lossless check: a divergence where the baseline's top-2 logprob margin is below this "
        "is a near-tie, else a mismatch (docs/bench.md)",
    )  # fmt: skip
    seed: int = Field(0, description="Sampling seed.")
    ignore_eos: Bool = Field(
        False,
        description="Generate --max-tokens even past the end-of-sequence token.",
        json_schema_extra=flag("--ignore-eos/--no-ignore-eos"),
    )
    mode: Literal["chat", "completion"] = Field("chat", description="chat | completion.")
    tokenizer: str | None = Field(None, description="Local tokenizer for the recount (default: MODEL's).")
    request_timeout_s: float = Field(
        300.0, gt=0, description="Seconds per request.", json_schema_extra=flag("--timeout")
    )
    max_error_rate: float = Field(0.1, ge=0, le=1, description="Fail a run above this, e.g. 10%.")
    metrics_settle_timeout_s: float = Field(15.0, ge=0, description="poll /metrics until two scrapes agree")
    nvml_interval_s: float = Field(0.1, gt=0)
    gpu_bandwidth_gbps: float | None = Field(
        None, gt=0, description="GB/s for the roofline.", json_schema_extra=flag("--gpu-bandwidth")
    )
    out: str | None = None
    headline: Literal["decode", "e2e"] = Field(
        "decode",
        description="Speedup basis of the headline, best k and gates: decode (the decode rate, no TTFT) | "
        "e2e (end to end).",
    )
    min_speedup: float | None = Field(None, gt=0, description="Gate: best k's speedup ≥ X.")
    baseline_report: str | None = Field(None, description="Gate: an older report.json.")
    max_regression: float | None = Field(None, ge=0, description="Gate: allowed drop, e.g. 5%.")

    @field_validator("draft_tokens", "concurrency", mode="before")
    @classmethod
    def _int_lists(cls, v: object) -> object:
        if isinstance(v, str) and v.strip().lower() == "auto":
            return None
        return parse_int_list(v)

    @field_validator("baseline_engine", mode="before")
    @classmethod
    def _engines(cls, v: object) -> object:
        return [x.strip() for x in v.split(",") if x.strip()] if isinstance(v, str) else v

    @field_validator(
        "max_regression", "max_error_rate", "warmup_tolerance", "consistency_tolerance", mode="before"
    )
    @classmethod
    def _fraction(cls, v: object) -> object:
        return parse_fraction(v)

    @field_validator("warmup", mode="before")
    @classmethod
    def _warmup(cls, v: object) -> object:
        return None if isinstance(v, str) and v.strip().lower() in ("all", "auto") else v

    @field_validator("draft_tokens")
    @classmethod
    def _ks(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        bad = [k for k in v if not 0 <= k <= MAX_DRAFT_TOKENS]
        if bad:
            raise ValueError(f"draft token counts must be in 0..{MAX_DRAFT_TOKENS}, not {int_ranges(bad)}")
        return v

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        return check_url(v)

    @field_validator("concurrency")
    @classmethod
    def _conc(cls, v: list[int]) -> list[int]:
        if not v or any(c < 1 for c in v):
            raise ValueError(f"concurrency values must be >= 1, not {int_ranges(v)}")
        return v


class PlanSection(Section):
    """`specq plan`: GPU memory planning. `batch`/`session_len` fall back to `engine.max_batch_size` and
    `engine.session_len`; the constants below are documented in docs/plan.md."""

    gpu_memory: str | None = Field(
        None, description="The GPU's memory, e.g. 24GiB (default: measured by NVML)."
    )
    batch: int | None = Field(
        None,
        ge=1,
        description="Concurrent sequences (default: engine.max_batch_size).",
        json_schema_extra=flag(checked=True),
    )
    session_len: int | None = Field(
        None,
        ge=64,
        description="Tokens per session (default: engine.session_len).",
        json_schema_extra=flag(checked=True),
    )
    kv_dtype: Literal["auto", "float16", "bfloat16", "int8", "int4"] = Field(
        "auto", description="KV dtype: auto, float16, bfloat16, int8 or int4."
    )
    engine: Literal["lmdeploy", "embedded"] | None = Field(
        None, description="The memory model: lmdeploy | embedded (default: engine.engine; auto = lmdeploy)."
    )
    max_prefill_token_num: int = Field(8192, ge=64, description="LMDeploy's --max-prefill-token-num")
    cache_max_entry_count: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Evaluate this LMDeploy KV ratio (what the server will run with, e.g. specq serve's 0.8) "
        "instead of recommending one.",
        json_schema_extra=flag(checked=True),
    )
    prefill_tokens: int | None = Field(
        None, ge=1, description="embedded engine: longest prompt prefilled at once; default: session_len"
    )
    cuda_context: str = Field("588MiB", description="per process: the CUDA context (588 MiB on the H200)")
    driver_reserved: str = Field(
        "615MiB", description="what NVML counts as used with no process on the GPU (615 MiB on the H200)"
    )
    load_overhead: str = Field(
        "480MiB", description="LMDeploy: what its engine holds beyond the weight files once loaded"
    )
    cuda_graphs: str = Field(
        "580MiB", description="LMDeploy: CUDA graphs and runtime buffers after warm-up (0 with eager_mode)"
    )


class DraftSection(Section):
    """`specq draft train/eval`: a DFlash drafter for one target. Training knobs below `self_distill` are
    for config files; the defaults train a drafter for the small toy target in about two minutes on 2 CPU
    cores."""

    layers: int = Field(1, ge=1, le=8, description="Draft decoder layers.")
    block_size: Literal[8, 16] = Field(8, description="DFlash block size: 8 or 16.")
    steps: int = Field(300, ge=1, description="Training steps.")
    data: str | None = Field(
        None,
        description="Texts: a .jsonl/.json/.txt file, a directory, a dataset name, or 'toy' (draft eval: "
        "their held-out tenth).",
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="cpu, cuda or auto.")
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = Field(
        "auto", description="Checkpoint dtype: auto (the target's; fp16 for AWQ), float16, ..."
    )
    seed: int = Field(0, description="Seed: same seed, same drafter.")
    self_distill: Bool = Field(
        True,
        description="Train on the target's own continuations.",
        json_schema_extra=flag("--self-distill/--no-self-distill"),
    )
    threads: int | None = Field(None, ge=1, description="CPU threads for training; default: torch's")
    target_layer_ids: list[int] | None = Field(None, description="default: LMDeploy's convention")
    mask_token_id: int | None = Field(None, ge=0, description="default: the highest id unused in the data")
    lr: float = Field(2e-3, gt=0)
    gamma: float = Field(4.0, gt=0, description="loss weight exp(-(k-1)/gamma) for draft slot k")
    batch_size: int = Field(8, ge=1, description="sequences per step")
    anchors: int = Field(16, ge=1, description="query blocks per sequence per step")
    samples: int = Field(128, ge=1, description="training sequences")
    prompt_tokens: int = Field(32, ge=4, description="prompt tokens before the target's continuation")
    chat_fraction: float = Field(
        0.5, ge=0, le=1,
        description="share of self-distilled prompts sent as a chat user turn through the target's template",
    )  # fmt: skip
    gen_tokens: int = Field(96, ge=4, description="tokens the target generates per training sequence")
    eval_prompts: int = Field(16, ge=1, description="held-out prompts for the offline acceptance")
    eval_tokens: int = Field(64, ge=4, description="greedy target tokens scored per held-out prompt")


class SpecqConfig(Section):
    """The whole resolved configuration. Every command reads the sections it needs."""

    model: ModelSection = Field(default_factory=ModelSection)
    engine: EngineSection = Field(default_factory=EngineSection)
    speculative: SpeculativeSection = Field(default_factory=SpeculativeSection)
    generation: GenerationSection = Field(default_factory=GenerationSection)
    quantize: QuantizeSection = Field(default_factory=QuantizeSection)
    convert: ConvertSection = Field(default_factory=ConvertSection)
    bench: BenchSection = Field(default_factory=BenchSection)
    plan: PlanSection = Field(default_factory=PlanSection)
    draft: DraftSection = Field(default_factory=DraftSection)


STAGES: dict[str, tuple[str, ...]] = {
    "serve": ("model", "engine", "speculative", "generation"),
    "bench": ("model", "engine", "speculative", "generation", "bench"),
    "quantize": ("quantize",),
    "convert": ("model", "convert"),
    "plan": ("model", "engine", "speculative", "plan"),
    "draft": ("model", "draft"),
}
