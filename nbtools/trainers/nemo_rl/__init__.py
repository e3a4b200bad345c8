"""NeMo-RL (NVIDIA-NeMo/RL), everything nbtools knows of it in one folder: the GRPO command and its Hydra overrides
(``_command``), the releases (``_releases``), the lint (``_lint``), the trainer (``_trainer``: eval plan, citation,
fit inputs) and the layout of its runs (``_layout``). ``TRAINER`` and ``LAYOUT`` are what the registry asks for.

Example:
    >>> print(nbtools.trainers.nemo_rl.command(cfg))
    cd /opt/nemo-rl && python -u examples/run_grpo.py --config examples/configs/recipes/llm/... cluster.num_nodes=1 ...
"""

from __future__ import annotations

from nbtools.trainers.nemo_rl._command import (
    DEFAULT_CODE_DIR,
    DEFAULT_RECIPE,
    EXPANDABLE,
    POLICY_ALLOC_KEY,
    Override,
    command,
    command_lines,
    entry_script,
    hydra_unquote,
    hydra_value,
    local_recipe,
    overrides,
    parse_override,
    recipe_files,
    recipe_path,
    recipe_tree,
    recipe_value,
    resolved,
)
from nbtools.trainers.nemo_rl._layout import LAYOUT, NemoRlLayout
from nbtools.trainers.nemo_rl._releases import NEMO_RL, NemoRlRelease, release_facts
from nbtools.trainers.nemo_rl._trainer import NemoRl

TRAINER = NemoRl

__all__ = ["TRAINER", "LAYOUT", "NemoRl", "NemoRlLayout", "NEMO_RL", "NemoRlRelease", "release_facts", "Override", "DEFAULT_RECIPE",
           "DEFAULT_CODE_DIR", "entry_script", "recipe_path", "local_recipe", "recipe_tree", "overrides", "command",
           "command_lines", "hydra_value", "hydra_unquote", "parse_override", "recipe_files", "recipe_value", "resolved",
           "POLICY_ALLOC_KEY", "EXPANDABLE"]
