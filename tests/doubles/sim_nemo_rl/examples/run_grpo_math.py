"""TEST DOUBLE of NeMo-RL v0.5.0 ``examples/run_grpo_math.py`` (run_grpo.py's double with this script's facts).

The real script builds ``MathEnvironment`` itself and never reads ``data.env_name`` (nemo_rl_releases.py): a reward
mix routed through ``data.env_name`` is ignored here as it is there. NeMo-RL v0.7.0 has no such script.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_grpo import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(script="examples/run_grpo_math.py"))
