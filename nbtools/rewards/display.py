"""Display layer for re-scoring: one matplotlib figure, old vs new (thin; all numbers come from RescoreResult)."""

from __future__ import annotations

import functools
import os

import numpy as np

from nbtools._escape import html as _h
from nbtools._html import inline_styles, segments_html
from nbtools.rewards._rescore import RescoreResult
from nbtools.rewards._text import tag_segments

__all__ = ["plot_rescore", "compare_view", "flipped_groups", "group_html"]


def plot_rescore(result: RescoreResult, *, save: str | os.PathLike | None = None):
    """Old vs new: mean reward per step, groups with a learning signal per step, per-sample advantages.

    Why: shows at a glance whether a new reward mix would have given GRPO more (or less) to learn from.

    Args:
        result: what :func:`nbtools.rewards.rescore` returned.
        save: PNG path (written atomically); None to skip.

    Returns:
        The matplotlib Figure.

    Example:
        >>> fig = nbtools.rewards.display.plot_rescore(result, save=cfg.run_dir / "figures" / "rescore.png")
    """
    from matplotlib.ticker import MaxNLocator

    from nbtools import _figure

    table = result.table()
    s = result.samples
    fig, (ax_r, ax_g, ax_a) = _figure.new(1, 3, figsize=(14, 4))
    mark = (
        {} if len(table) > 30 else {"marker": "o", "markersize": 4}
    )  # markers only while they stay readable
    ax_r.plot(table["step"], table["old_reward"], label="old reward", **mark)
    ax_r.plot(table["step"], table["new_reward"], label="new mix", **mark)
    ax_r.set(title="mean reward per step", xlabel="step", ylabel="reward")
    ax_r.legend()

    ax_g.plot(table["step"], table["old_signal_groups"], label="old reward", **mark)
    ax_g.plot(table["step"], table["new_signal_groups"], label="new mix", **mark)
    summary = result.summary()
    ax_g.set(
        title=f"groups with a learning signal (gained {summary['flipped_to_signal']}, "
        f"lost {summary['flipped_to_no_signal']})",
        xlabel="step",
        ylabel="groups with unequal rewards",
        ylim=(0, max([1, *table["groups"].tolist()]) * 1.05),
    )
    ax_g.legend()
    for ax in (ax_r, ax_g):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))

    old_a, new_a = s["old_advantage"].to_numpy(float), s["new_advantage"].to_numpy(float)
    ax_a.scatter(old_a, new_a, s=10, alpha=0.4)
    finite = np.isfinite(old_a) & np.isfinite(new_a)
    if finite.any():
        lo = float(min(old_a[finite].min(), new_a[finite].min()))
        hi = float(max(old_a[finite].max(), new_a[finite].max()))
        ax_a.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--")
    ax_a.set(title="advantage per sample", xlabel="old advantage", ylabel="new advantage")
    if s.empty:
        ax_r.text(0.5, 0.5, "no trajectories yet", ha="center", va="center", transform=ax_r.transAxes)
    mix = " + ".join(f"{w:.2f} × {c.name}" for c, w in zip(result.mix.components, result.mix.weights, strict=True))
    fig.suptitle(f"re-scored with reward = {mix}   ({len(s):,} samples, {len(table)} steps)")
    fig.tight_layout()
    if save is not None:
        _figure.save(fig, save)
    return fig


_WHICH = {"gained a signal": "to_signal", "lost a signal": "to_no_signal", "every group": None}


def flipped_groups(result: RescoreResult, which: str = "gained a signal") -> list[int]:
    """Group ids (``result.samples["group"]``) for the comparison view: those that gained or lost a GRPO signal
    under the new mix, or every group.

    Example:
        >>> nbtools.rewards.display.flipped_groups(result)[:5]
    """
    if which not in _WHICH:
        from nbtools.errors import ConfigError

        raise ConfigError(f"which: expected one of {list(_WHICH)}, got {which!r}")
    rows = result.samples if _WHICH[which] is None else result.flipped_samples(_WHICH[which])
    return [int(g) for g in dict.fromkeys(rows["group"])]


def group_html(result: RescoreResult, group: int) -> str:
    """One group's samples, old vs new reward and advantage, responses left-aligned with their tags highlighted."""
    s = result.samples[result.samples["group"] == group]
    if s.empty:
        return inline_styles("<div class='nbx'>no samples in this group</div>")
    parts = [c for c in s.columns if c.startswith("r_")]
    head = "".join(f"<th>{_h(h)}</th>" for h in ["idx", "response", "truth", "old reward", "new reward",
                                                          "old adv.", "new adv.", *parts])
    body = "".join(
        f"<tr class='nbx-row'><td class='num'>{r['idx']}</td><td class='txt'>{segments_html(tag_segments(r['response']), 400)}"
        f"</td><td>{_h(str(r['ground_truth']))}</td>"
        + "".join(f"<td class='num'>{r[c]:.3g}</td>" for c in ("old_reward", "new_reward", "old_advantage",
                                                              "new_advantage", *parts)) + "</tr>"
        for _, r in s.iterrows())
    first = s.iloc[0]
    return inline_styles(f"<div class='nbx nbx-rescore'><div class='note'>step {first['step']} · group {group} · "
            f"{len(s)} samples · prompt: <span class='txt'>{_h(str(first['prompt']))}</span></div>"
            f"<table><colgroup><col style='width:5%'><col style='width:40%'><col style='width:7%'></colgroup>"
            f"<tr>{head}</tr>{body}</table></div>")


def compare_view(result: RescoreResult, which: str = "gained a signal"):
    """A small interactive view of a re-scoring: pick which groups (gained / lost a signal, every group) and step
    through them one at a time, old vs new reward and advantage per sample. Saved in a notebook (no kernel), it shows
    the group that was on screen as static HTML with a note to re-run the cell.

    Example:
        >>> nbtools.rewards.display.compare_view(result)
    """
    import ipywidgets as w

    pick = w.Dropdown(options=list(_WHICH), value=which, description="groups")
    pos = w.BoundedIntText(value=1, min=1, max=1, description="group #", layout=w.Layout(width="170px"))
    count, body = w.HTML(), w.HTML()

    def show(_=None):
        ids = flipped_groups(result, pick.value)
        pos.max = max(len(ids), 1)
        count.value = f"{len(ids)} groups" if ids else "no such group"
        body.value = group_html(result, ids[pos.value - 1]) if ids else ""

    pick.observe(lambda _: (setattr(pos, "value", 1), show()), names="value")
    pos.observe(show, names="value")
    show()
    return _view_class()([w.HBox([pick, pos, count]), body])


@functools.cache
def _view_class():
    """``CompareView``: a VBox whose display also carries a static snapshot (``text/html``) of what it shows."""
    import ipywidgets as w

    class CompareView(w.VBox):
        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            data = bundle[0] if isinstance(bundle, tuple) else bundle
            pick, pos, count = self.children[0].children
            note = ("<div class='nbx-frozen' style='padding:4px 8px;background-color:#fff8e1;border-left:3px solid "
                    f"#f0a020'>A snapshot of the re-scoring view: groups that {_h(pick.value)}, group {pos.value} of "
                    f"{_h(count.value)}. <b>Re-run the cell</b> to step through the others.</div>")
            data["text/html"] = note + self.children[1].value
            data["text/plain"] = (f"Re-scoring view ({pick.value}: {count.value}); re-run this cell in JupyterLab to "
                                  "step through the groups.")
            return bundle

    return CompareView
