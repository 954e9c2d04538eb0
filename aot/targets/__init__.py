"""Targets: the presets in targets/*.toml (or a user's file), the checks their fields pass, and
the capabilities record code generation reads (capabilities.py).

`--target NAME` picks a preset; `--target path/to/file.toml` loads a user's own.
"""

from aot.targets.capabilities import Capabilities, Int8Dot, capabilities, common_capabilities
from aot.targets.presets import (
    Target,
    default_int8_dot,
    host_preset_name,
    host_target_name,
    list_targets,
    load_target,
    preset_names,
    resolve_targets,
)

__all__ = ["Capabilities", "Int8Dot", "Target", "capabilities", "common_capabilities", "default_int8_dot",
           "host_preset_name", "host_target_name", "list_targets", "load_target", "preset_names",
           "resolve_targets"]
