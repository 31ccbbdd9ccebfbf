"""The GPU scenarios: what specq measures on a CUDA machine, each a module with `main(argv) -> exit code`,
run by `python benchmarks/gpu.py NAME [OPTIONS]` (`--help` after NAME lists a scenario's options). Most
need LMDeploy 0.18 and FlashAttention-3 (`specq fa3 build`); docs/gpu-guide.md says which, and
docs/verification.md records what each showed on the H200."""

from __future__ import annotations

# name: (module, what it measures)
SCENARIOS: dict[str, tuple[str, str]] = {
    "check": ("check", "`make gpu-check`: the toy pipeline on CUDA (FA3, quantize, drafters, bench, plan)"),
    "check-qwen35": ("check_qwen35", "the Qwen3.5-shaped toy speculating with its MTP head and DFlash"),
    "check-qwen35-awq": ("check_qwen35_awq", "the 4-bit Qwen3.5 toy speculating through specq's patch"),
    "twin": ("twin", "scale twins: plan against NVML at 24 GB, the step-cost curve from 0.45 B to 27 B"),
    "draft": ("draft", "a DFlash drafter trained on CUDA for the medium toy, and its offline acceptance"),
    "spec-step-profile": ("spec_step_profile", "where a speculative step's time goes, by launch option"),
    "qwen35-load-probe": ("qwen35_load_probe", "convert's Qwen3.5 verdicts against LMDeploy's own load"),
    "gptq-toy": ("gptq_toy", "(CPU) the GPTQ toy target that `check` and tests/gpu load without gptqmodel"),
    "w4a16-kernel": ("w4a16_kernel", "specq's W4A16 kernel against LMDeploy's, tinygemm, gemlite, Marlin"),
    "w4a16-ceiling": ("w4a16_ceiling", "how much of the W4A16 kernel's time is reading its weights"),
    "w4a16-e2e": ("w4a16_e2e", "the 27B-AWQ twin served with each W4A16 kernel, plain and speculating"),
    "skinny-kernel": (
        "skinny_kernel",
        "specq's skinny bf16 linear against F.linear at the 27B's gate projection",
    ),
}
