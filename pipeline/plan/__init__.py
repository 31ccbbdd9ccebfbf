"""Stage: plan. GPU memory planning without torch: `run_plan(PlanRequest)` returns a `MemoryPlan` (the lower
level `plan_memory(target, draft, request)` plans for checkpoints already open); `fits(request)` is the
one-line check serve's preflight calls (None = fits)."""

from .planner import MemoryPlan, ModelMemory, PlanRequest, fits, parse_memory, plan_memory, run_plan

__all__ = ["MemoryPlan", "ModelMemory", "PlanRequest", "fits", "parse_memory", "plan_memory", "run_plan"]
