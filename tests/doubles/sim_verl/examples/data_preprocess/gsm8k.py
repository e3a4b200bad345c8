"""TEST DOUBLE of verl's ``examples/data_preprocess/gsm8k.py`` (v0.7.0 / v0.9.0), in the simulated cluster's verl checkout.

NOT verl's script: it takes the same command line (``--local_save_dir DIR``) and writes ``train.parquet`` and
``test.parquet`` with the rows the real one writes (``data_source`` "openai/gsm8k", ``prompt`` one user message,
``ability`` "math", ``reward_model`` {style "rule", ground_truth}, ``extra_info`` {split, index}), but from the
simulated image's task (the rehearsal's train and held-out problems, named by ``sim_gke.json`` beside the checkout)
instead of downloading openai/gsm8k.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local_save_dir", default="~/data/gsm8k")
    args = ap.parse_args()
    sim = json.loads((CHECKOUT / "sim_gke.json").read_text())
    sys.path.insert(0, sim["nbtools_root"])
    import pandas as pd

    from nbtools.config import load
    from nbtools.rehearsal import task

    train, test = task.make_split(load(sim["rehearsal_config"], backend="local"))
    out = os.path.expanduser(args.local_save_dir)
    os.makedirs(out, exist_ok=True)
    for split, problems in (("train", train), ("test", test)):
        rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": p.prompt}], "ability": "math",
                 "reward_model": {"style": "rule", "ground_truth": p.ground_truth},
                 "extra_info": {"split": split, "index": i}} for i, p in enumerate(problems)]
        pd.DataFrame(rows).to_parquet(os.path.join(out, f"{split}.parquet"))
    print(f"(verl test double) wrote {len(train)} train and {len(test)} test rows to {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
