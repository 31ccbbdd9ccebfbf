"""Stage: plan. GPU memory planning without torch: `plan_memory(target, draft, cfg)` returns a `MemoryPlan`;
`fits(cfg)` is the one-line check serve's preflight calls (None = fits)."""

from .planner import MemoryPlan, ModelMemory, fits, parse_memory, plan_for_config, plan_memory

__all__ = ["MemoryPlan", "ModelMemory", "fits", "parse_memory", "plan_for_config", "plan_memory"]
