"""The Hub model-card template's sections the card used to leave out: Developed by, Model Sources, the training
regime (precision, sequence length, optimizer, schedule) and Environmental Impact (issue 45).

Why: ``huggingface_hub``'s ``templates/modelcard_template.md`` asks for them, and a reader deciding whether to trust a
checkpoint looks for them first. Each value comes from the experiment or the checkpoint's own ``config.yaml``; what
nbtools cannot know (who published it, the carbon it cost) says so instead of guessing.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["procedure", "sources", "environmental_impact", "DEVELOPED_BY"]

DEVELOPED_BY = "More Information Needed (the experiment does not name its authors)"  # the Hub template's placeholder
GRPO_PAPER = "https://arxiv.org/abs/2402.03300"


def _kwargs(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items() if v is not None)


def procedure(cfg: Any, step_cfg: dict[str, Any], miniature: bool) -> dict[str, str]:
    """Precision, sequence length, optimizer and LR schedule, from the checkpoint's config.yaml where it has them."""
    policy = step_cfg.get("policy") or {}
    opt = policy.get("optimizer") or {}
    unknown = "not recorded (the checkpoint's config.yaml is not visible from here)"
    optimizer = f"{opt.get('name', '?')} ({_kwargs(opt.get('kwargs') or {})})" if opt else unknown
    sched = policy.get("scheduler")
    if sched:
        items = sched if isinstance(sched, list) else [sched]
        schedule = "; ".join(f"{s.get('name', '?')} ({_kwargs(s.get('kwargs') or {})})" if isinstance(s, dict) and "name" in s
                             else _kwargs(s) if isinstance(s, dict) else str(s) for s in items)
    elif miniature:
        r = cfg.rehearsal
        schedule = (f"LinearLR warmup over {r.lr_warmup_steps} steps from {r.lr_warmup_start_factor}× the learning rate, "
                    f"then {r.lr_decay}" + (f" to {r.lr_min_ratio}× at the last step" if r.lr_decay == "cosine" else ""))
    else:
        schedule = "constant" if opt else unknown
    return {"precision": str(policy.get("precision") or unknown),
            "sequence length": f"{cfg.model.max_total_sequence_length} tokens (prompt + generation)",
            "optimizer": optimizer, "learning-rate schedule": schedule}


def _url(bib: str) -> str | None:
    if m := re.search(r"\\url\{([^}]+)\}", bib):
        return m.group(1)
    if m := re.search(r"eprint\s*=\s*\{([\d.]+)\}", bib):
        return f"https://arxiv.org/abs/{m.group(1)}"
    return None


def sources(trainer: str, base_model: str, is_hub_id: bool) -> list[str]:
    """The Model Sources rows: the trainer's repository or paper, GRPO's paper, the base model's page."""
    from nbtools import trainers

    rows = []
    if trainer in trainers.CITATIONS and (u := _url(trainers.CITATIONS[trainer][1])):
        rows.append(f"- **Repository (trainer):** {trainer}: {u}")
    rows.append(f"- **Paper (method):** GRPO, DeepSeekMath: {GRPO_PAPER}")
    if is_hub_id:
        rows.append(f"- **Base model:** https://huggingface.co/{base_model}")
    return rows


def environmental_impact(hardware: str, gpu_hours: str, region: str | None) -> str:
    """The template's Environmental Impact section, with the values the ML CO2 Impact calculator asks for."""
    provider = "Google Cloud (GKE)" if region else "none: this machine"
    return "\n".join([
        "## Environmental Impact", "",
        "Carbon emissions can be estimated with the Machine Learning Impact calculator (https://mlco2.github.io/impact) "
        "(Lacoste et al., 2019) from the values below; nbtools does not estimate them.", "",
        f"- **Hardware Type:** {hardware}", f"- **Hours used:** {gpu_hours}", f"- **Cloud Provider:** {provider}",
        f"- **Compute Region:** {region or 'n/a'}", "- **Carbon Emitted:** not estimated", ""])
