"""Test double of nemo_rl.distributed.virtual_cluster: only PY_EXECUTABLES.SYSTEM (see ../../README.md)."""

import sys


class PY_EXECUTABLES:  # noqa: N801 - NeMo-RL's name
    SYSTEM = sys.executable
