"""Static memory planning: every intermediate tensor gets an offset in one arena."""

from aot.planner.memory import Interval, MemoryPlan, plan_memory

__all__ = ["Interval", "MemoryPlan", "plan_memory"]
