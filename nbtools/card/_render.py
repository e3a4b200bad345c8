"""The card as text: Hub metadata built with ``huggingface_hub.ModelCardData`` and a Markdown body from the facts.

Why: the Hub reads ``base_model``/``license``/``datasets``/``tags`` and the ``model-index`` from the YAML front
matter, so those are built (and validated) by huggingface_hub's own classes rather than by string templates.
The evaluation section sits between two HTML comments so notebook 07 can replace it alone.

Example:
    >>> data = metadata(facts, evals, dataset)
    >>> text = "---\\n" + data.to_yaml() + "\\n---\\n" + body(facts, evals, dataset, files)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import nbtools.card._io as _io
from nbtools._escape import is_hub_id, md, md_code
from nbtools.card._facts import Facts, hub_dataset
from nbtools.card._template import DEVELOPED_BY, environmental_impact, sources
from nbtools.errors import ConfigError, Fix, NotFoundError

__all__ = ["EVAL_START", "EVAL_END", "Dataset", "comparisons_of", "eval_dataset", "eval_results", "metadata", "body",
           "evaluation_section", "upload_call", "CURVES", "CONFIG"]

EVAL_START = "<!-- nbtools:evaluation"
EVAL_END = "<!-- /nbtools:evaluation -->"
CURVES = "training_curves.png"
CONFIG = "experiment.yaml"
Dataset = tuple[str, str, str | None]  # (Hub id or name, pretty name, split)


def comparisons_of(comparisons: Any) -> list[tuple[str, Any]]:
    """``{label: Comparison | its to_dict() | a saved comparison JSON}`` (or one of them) -> [(label, Comparison)].

    Example:
        >>> comparisons_of({"greedy": cmp})[0][0]
        'greedy'
    """
    from nbtools.evals import Comparison

    if comparisons is None:
        return []
    if isinstance(comparisons, Comparison | str | os.PathLike) or (
            isinstance(comparisons, Mapping) and "acc_b" in comparisons):
        comparisons = [comparisons]
    if isinstance(comparisons, Mapping):
        items = list(comparisons.items())
    elif isinstance(comparisons, Sequence):
        items = [(Path(x).stem.removeprefix("comparison_") if isinstance(x, str | os.PathLike) else f"evaluation {i}", x)
                 for i, x in enumerate(comparisons, 1)]
    else:
        raise ConfigError(f"comparisons must be a {{label: Comparison}} mapping, got {type(comparisons).__name__}",
                          fix=Fix("pass e.g. {'greedy': comparison} with comparison = nbtools.evals.compare(base, tuned)",
                                  cli="save a comparison first (notebook 07 writes eval/comparison_*.json)"))
    fields = {f.name for f in dataclasses.fields(Comparison)}
    out = []
    for label, x in items:
        if isinstance(x, str | os.PathLike):
            text = _io.read_text(x)
            if text is None:
                raise NotFoundError(f"expected a saved comparison at {x}, found nothing",
                                    fix=Fix("save it first: comparison.save(path) (notebook 07)",
                                            cli="save it first: notebook 07 writes eval/comparison_*.json"))
            x = json.loads(text)
        if isinstance(x, Mapping):
            d = {k: v for k, v in x.items() if k in fields}
            d["ci_a"], d["ci_b"] = tuple(d["ci_a"]), tuple(d["ci_b"])
            x = Comparison(**d)
        if not isinstance(x, Comparison):
            raise ConfigError(f"comparison {label!r} is a {type(x).__name__}, not an nbtools.evals.Comparison",
                              fix=Fix("pass the result of nbtools.evals.compare(baseline, fine_tuned)",
                                      cli="save a comparison first (notebook 07 writes eval/comparison_*.json)"))
        n = _samples(x)
        if n and n > 1 and "(n=" not in str(label):  # a saved file's stem ("sampled") says what the notebook said
            label = f"{label} (n={n})"
        out.append((_label(label), x))
    return out


def _label(label: Any) -> str:
    """A comparison's label names a metric in the Hub metadata (``"<label> accuracy"``): plain words only."""
    text = str(label)
    if not re.fullmatch(r"[\w][\w .:@+=,()/-]{0,63}", text):
        raise ConfigError(f"comparison label {text!r} cannot name a metric in the model card (letters, digits, spaces "
                          f"and . : @ + = , ( ) / - only, at most 64 characters); fix: pass "
                          f"{{'greedy': comparison}}, or rename the saved file to comparison_<label>.json")
    return text


def eval_dataset(rehearsal: bool, train_dataset: str, dataset: str | None) -> Dataset:
    """What the comparisons were run on: the named dataset, the rehearsal's held-out split, or MATH-500.

    The first item becomes the model-index's ``dataset.type``, which the Hub reads as a dataset id: it must be one.
    """
    if dataset:
        ds = hub_dataset(dataset) or (dataset, dataset, None)
    elif rehearsal:
        ds = train_dataset, f"{train_dataset} (held-out split, generated by nbtools.rehearsal)", "held-out"
    else:
        return hub_dataset("math500")  # nbtools.evals.evaluate's default on a cluster
    if not is_hub_id(ds[0]):
        raise ConfigError(f"the evaluation dataset {ds[0]!r} cannot name a dataset in the card's metadata (a Hub id: "
                          "letters, digits, . _ - and at most one /)",
                          fix=Fix("pass dataset= with its Hub id or short name (e.g. dataset=\"math500\"), or rename "
                                  "data.dataset", cli="pass --dataset with its Hub id or short name (e.g. --dataset "
                                  "math500), or rename data.dataset"))
    return ds


def _samples(c: Any) -> int | None:
    if c.flips is not None:
        return 1
    if c.pass_at_k:
        return int(max(r["k"] for r in c.pass_at_k))
    return None


def _clean(x: Any) -> Any:
    if isinstance(x, float | int) and not isinstance(x, bool):
        return (int(x) if isinstance(x, int) else float(x)) if math.isfinite(float(x)) else None
    if hasattr(x, "item"):  # numpy scalars
        return _clean(x.item())
    return x


def eval_results(evals: list[tuple[str, Any]], ds: Dataset) -> list[Any]:
    """One ``huggingface_hub.EvalResult`` per comparison: the fine-tuned model's accuracy, in the Hub's fields only.

    ``args`` is left out: the Hub reserves it for the metric's own arguments (``Metric.compute()``'s, per
    huggingface_hub's ``EvalResult``) and accuracy has none here; the intervals, the test and its p-value are in the
    card's evaluation section.
    """
    from huggingface_hub import EvalResult

    return [EvalResult(task_type="text-generation", task_name="Text Generation", dataset_type=ds[0],
                       dataset_name=ds[1], dataset_split=ds[2], metric_type="accuracy",
                       metric_name=f"{label} accuracy", metric_value=_clean(c.acc_b)) for label, c in evals]


def metadata(facts: Facts, results: list[Any] | None, name: str):
    """The YAML front matter as a validated ``ModelCardData`` (a model-index only when there are results)."""
    from huggingface_hub import ModelCardData

    s = facts.setup
    datasets = [d[0] for d in (hub_dataset(s.dataset), hub_dataset(s.validation)) if d]
    return ModelCardData(
        base_model=s.base_model if is_hub_id(s.base_model) else None, library_name="transformers",
        pipeline_tag="text-generation", license=facts.license, datasets=datasets or None, language=["en"],
        tags=["grpo", "reinforcement-learning", s.tag, "nbtools"], metrics=["accuracy"] if results else None,
        model_name=name if results else None, eval_results=results or None)


def _f(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def _hours(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])  # cells escaped by callers


def evaluation_section(evals: list[tuple[str, Any]], ds: Dataset, base_model: str, weights: str | None) -> str:
    """The ``## Evaluation`` section between its markers (also what notebook 07's update replaces): testing data,
    metric and protocol, then the results with their intervals, test and p-value."""
    head = f"{EVAL_START} weights={weights or 'unknown'} -->\n## Evaluation\n\n"
    if not evals:
        return head + "This model has not been evaluated yet; no results are reported.\n\n" + EVAL_END
    split = f", split {md_code(ds[2])}" if ds[2] else ""
    alphas = sorted({float(c.alpha) for _, c in evals})
    samples = sorted({s for _, c in evals if (s := _samples(c))})
    protocol = [
        "### Testing Data, Factors & Metrics", "",
        f"- **Testing data**: {md(ds[1])} ({md_code(ds[0])}{split}), the same problems for both models.",
        f"- **Metric**: accuracy, the fraction of problems answered right (averaged over "
        f"{' or '.join(map(str, samples)) or 'the'} sample(s) per problem).",
        f"- **Protocol**: the base model {md_code(base_model)} and this model were evaluated the same way (same prompts, "
        "same generation settings). Accuracy intervals are Wilson score 95% intervals over problems; the Δ interval "
        "is a 95% paired bootstrap over problems (unpaired comparisons: a normal approximation). The test compares "
        f"the two models on the same problems; a difference is called significant at α = "
        f"{', '.join(f'{a:g}' for a in alphas)}.", ""]
    rows = []
    for label, c in evals:
        ci = f" [{c.ci_low:+.3f}, {c.ci_high:+.3f}]" if c.ci_low is not None else ""
        rows.append((md(label), f"{_f(c.acc_a)} [{_f(c.ci_a[0])}, {_f(c.ci_a[1])}]",
                     f"{_f(c.acc_b)} [{_f(c.ci_b[0])}, {_f(c.ci_b[1])}]", f"{c.delta:+.3f}{ci}",
                     f"{md(c.test)} ({'paired' if c.paired else 'unpaired'})", _p(c.p_value), f"{c.alpha:g}",
                     c.n_problems, _samples(c) or "n/a"))
    table = _table(rows, ("evaluation", f"baseline {md_code(base_model)} [95% CI]", "this model [95% CI]",
                          "Δ [95% CI]", "test", "p-value", "α", "problems", "samples / problem"))
    details = []
    for label, c in evals:
        details.append(f"- **{md(label)}**: {md(c.verdict)}")
        if c.flips:
            f = c.flips
            details.append(f"  Of the other problems {f['both']} were right and {f['neither']} wrong in both models.")
        if c.pass_at_k:
            details.append("  " + ", ".join(f"pass@{int(r['k'])} {r['a']:.3f} → {r['b']:.3f}" for r in c.pass_at_k) + ".")
        details.extend(f"  Note: {md(n)}" for n in c.notes)
    return (head + "\n".join(protocol) + "\n### Results\n\n" + table + "\n\n#### Summary\n\n" + "\n".join(details)
            + "\n\n" + EVAL_END)


def _training(facts: Facts, files: Sequence[str]) -> str:
    s, t = facts.setup, facts.training
    gpu_hours = (f"{t.gpu_hours:.1f} ({s.gpus} GPUs × {_hours(t.wall_seconds)})" if t.gpu_hours is not None else
                 "none (trained on CPU)" if s.rehearsal else "n/a" if s.gpus is None else "unknown (no event times)")
    data = md_code(s.dataset) + (f", validation {md_code(s.validation)}" if s.validation else "")
    if s.rehearsal:
        data += " (generated in code by nbtools' rehearsal: prompts `max a b c` over digits, with a held-out split)"
    hyper = [("algorithm", "GRPO (group-relative advantages, no value model)"),
             ("trainer", f"{md(s.trainer)}, {md(s.trainer_version)}")] + [
        (md(k), md(v)) for k, v in s.grpo.items() if k != "max steps"] + [
        ("max steps", md(s.grpo["max steps"]))] + [(md(k), md(v)) for k, v in facts.procedure.items()]
    speeds = [("steps trained", f"{t.steps if t.steps is not None else 'n/a'} (max_num_steps {s.grpo['max steps']})"),
              ("wall time", _hours(t.wall_seconds) + (" (first to last TensorBoard event)" if t.wall_seconds else "")),
              ("GPU-hours", gpu_hours)]
    out = ["## Training Details", "", "### Training Data", "", data, "", "### Training Procedure", "",
           f"GRPO on {md_code(s.base_model)}; every value below comes from the experiment config and the run's own "
           f"TensorBoard events. The full experiment (config hash {md_code(s.config_hash)}) is in [`{CONFIG}`]({CONFIG}) beside this card (secrets appear "
           "only by the name of their environment variable or Kubernetes Secret).", "",
           "#### Reward functions", "",
           f"From {md(s.rewards_source)}; weights are renormalised to sum to 1, as NeMo-RL's `combine_reward_functions`.", "",
           _table([(md(r["name"]), f"{r['weight']:g}", f"{r['normalized']:.3f}", md(json.dumps(r["kwargs"])) if r["kwargs"] else "")
                   for r in s.rewards], ("reward", "weight", "normalised", "kwargs")), "",
           "#### Training Hyperparameters", "", _table(hyper, ("", "")), "",
           "#### Speeds, Sizes, Times", "", _table(speeds, ("", "")), ""]
    if t.last:
        names = {"reward": "train reward", "accuracy": "validation accuracy", "generation_length": "mean generation length",
                 "kl": "KL penalty"}
        rows = [(names[k], f"{v[1]:.4g}", v[0]) for k, v in t.last.items()]
        if t.first_reward:
            rows.insert(0, ("train reward (first step)", f"{t.first_reward[1]:.4g}", t.first_reward[0]))
        if t.best_accuracy:
            rows.append(("validation accuracy (best)", f"{t.best_accuracy[1]:.4g}", t.best_accuracy[0]))
        out += ["#### Training curves", ""]
        if CURVES in files:
            out += [f"![reward and validation accuracy, mean generation length, KL per step]({CURVES})", ""]
        out += [_table(rows, ("metric (last logged unless noted)", "value", "step")), ""]
    return "\n".join(out) + "\n" + _checkpoint(facts)


def _checkpoint(facts: Facts) -> str:
    m = facts.merged
    if m.step is None:
        return "#### Checkpoint\n\nWhich training checkpoint these weights come from is not recorded.\n"
    value = m.info.get(m.metric_name) if m.metric_name else None
    order = "higher is better" if m.higher_is_better else "lower is better"
    if m.metric_name is None:
        why = "the latest checkpoint (`checkpointing.metric_name: null`)."
    elif m.best_step is not None and m.best_step != m.step:
        why = (f"{md_code(m.metric_name)} = {_f(value, 4)}; note: the best by that metric among the checkpoints on disk is "
               f"now step_{m.best_step}.")
    else:
        why = (f"the best {md_code(m.metric_name)} ({_f(value, 4)}, {order}) among the checkpoints the run kept "
               f"(`keep_top_k: {m.keep_top_k}`), ranked like NeMo-RL's top-k (ties go to the later step).")
    out = ["#### Checkpoint", "", f"Merged from **step_{m.step}**: {why}", ""]
    if m.kept:
        out += [_table([(f"step_{k['step']}" + (" (merged)" if k["step"] == m.step else ""), _f(k["value"], 4))
                        for k in m.kept], ("checkpoint on disk", md(m.metric_name or "metric"))), ""]
    out += [f"Merged from the {md_code(m.layout)} layout into {m.weight_files} safetensors file(s) ({m.tensors} tensors); "
            "every file's SHA-256 is in `checksums.json`.", ""]
    return "\n".join(out)


def _usage(facts: Facts) -> str:
    s = facts.setup
    prompt, max_new = s.example
    if facts.chat_template:
        prep = ("messages = [{\"role\": \"user\", \"content\": " + json.dumps(prompt) + "}]\n"
                "inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors=\"pt\", "
                "return_dict=True)\n")
    else:
        prep = f"inputs = tokenizer({json.dumps(prompt)}, return_tensors=\"pt\")\n"
    return ("## How to Get Started with the Model\n\n```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            f"model_id = \"YOUR_ORG/{s.name}\"  # or the path of the directory holding this card\n"
            "tokenizer = AutoTokenizer.from_pretrained(model_id)\n"
            "model = AutoModelForCausalLM.from_pretrained(model_id, dtype=\"auto\")\n" + prep +
            f"output = model.generate(**inputs, max_new_tokens={max_new}, do_sample=False)\n"
            "print(tokenizer.decode(output[0, inputs[\"input_ids\"].shape[-1]:], skip_special_tokens=True))\n```\n")


def upload_call(name: str, folder: str, step: int | None, config_hash: str) -> str:
    """The exact publishing code (never run by nbtools): create the repo, then ``upload_folder``."""
    what = f"{name}: GRPO" + (f" step {step}" if step is not None else "") + f", config {config_hash}"
    return ("from huggingface_hub import create_repo, upload_folder\n\n"
            f"create_repo(\"YOUR_ORG/{name}\", repo_type=\"model\", private=True, exist_ok=True)\n"
            f"upload_folder(repo_id=\"YOUR_ORG/{name}\", repo_type=\"model\", folder_path={json.dumps(folder)},\n"
            f"              commit_message={json.dumps(what)})")


def _details(facts: Facts, arch: Mapping[str, Any]) -> str:
    s = facts.setup
    merged = f"step_{facts.merged.step}" if facts.merged.step is not None else "a training checkpoint"
    kind = arch.get("model_type")
    what = (f"a causal language model ({md_code(kind)}" + (f", {md(arch['params'])} parameters" if arch.get("params") else "")
            + ")") if kind else "a causal language model"
    rows = [f"- **Model type:** {what}, fine-tuned with reinforcement learning (GRPO)",
            f"- **Finetuned from model:** {md_code(s.base_model)}",
            f"- **License:** {md_code(facts.license) if facts.license else 'unknown'}"
            + (f" (from {md(facts.license_source)})" if facts.license else ""),
            f"- **Trained with:** {md(s.trainer)}, {md(s.cluster)}",
            f"- **Developed by:** {md(DEVELOPED_BY)}", "- **Language(s):** English (`en`)"]
    if s.rehearsal:
        summary = (f"A miniature model trained by nbtools' local rehearsal: GRPO on {md_code(s.base_model)}, a tiny Llama "
                   "built in code, to answer `max a b c` prompts. It exists to exercise the training, checkpointing, "
                   f"merging and evaluation pipeline end to end on a CPU; merged from {merged}.")
    else:
        summary = (f"GRPO fine-tune of {md_code(s.base_model)} on {md_code(s.dataset)} with {md(s.trainer)}, "
                   f"merged from {merged} into this HuggingFace directory.")
    return "\n".join([f"# {md(s.name)}", "", summary, "", "## Model Details", "", "### Model Description", "", *rows, "",
                      "### Model Sources", "", *sources(s.trainer, s.base_model, is_hub_id(s.base_model)), ""])


def _uses(facts: Facts) -> str:
    s = facts.setup
    if s.rehearsal:
        direct = ("Reading it, loading it and scoring it as an example of what the pipeline produces. Its only skill "
                  "is the rehearsal's task (the largest of three digits); it has no other use.")
        out_of_scope = "Anything else: it is a toy model built in code, not a language model for any real text."
    else:
        direct = (f"Solving problems like those in {md_code(s.dataset)}, giving a final answer that the training "
                  "reward can check.")
        out_of_scope = ("General-purpose chat, advice, or any high-stakes use: the model was trained only on a "
                        "rule-based correctness reward and was neither tuned nor evaluated for safety.")
    return "\n".join([
        "## Uses", "", "### Direct Use", "", direct, "", "### Out-of-Scope Use", "", out_of_scope, "",
        "## Bias, Risks, and Limitations", "",
        f"- It keeps the biases and limitations of its base model {md_code(s.base_model)}; read that model's card.",
        f"- The reward only checks the final answer on {md_code(s.dataset)}: reasoning that reaches a right answer the "
        "wrong way is rewarded too, and behaviour outside that data was not trained or measured.",
        "- The evaluation below covers one dataset; its intervals say how precisely that was measured, not how the "
        "model does elsewhere.", "",
        "### Recommendations", "",
        "Check its answers before relying on them, and evaluate it on your own data before using it in a product.", ""])


_CITATIONS = {
    "grpo": ("GRPO", "@article{shao2024deepseekmath,\n  title   = {DeepSeekMath: Pushing the Limits of Mathematical Reasoning "
             "in Open Language Models},\n  author  = {Shao, Zhihong and Wang, Peiyi and Zhu, Qihao and Xu, Runxin and "
             "Song, Junxiao and Bi, Xiao and Zhang, Haowei and Zhang, Mingchuan and Li, Y. K. and Wu, Y. and Guo, Daya},"
             "\n  journal = {arXiv preprint arXiv:2402.03300},\n  year    = {2024}\n}"),
}


def _technical(facts: Facts, versions: Mapping[str, str]) -> str:
    s = facts.setup
    hardware = md(s.cluster) + ("" if s.rehearsal else f"; image {md_code(s.image)}")
    software = [f"- {md(name)} {md(v)}" for name, v in versions.items()]
    where = ("Training, merging and this card ran in one Python environment:" if s.rehearsal else
             f"Training ran in the image above ({md(s.trainer)} {md(s.trainer_version)}); the merge and this card with:")
    return "\n".join(["## Technical Specifications", "", "### Compute Infrastructure", "", f"- **Hardware:** {hardware}",
                      "", "### Framework versions", "", where, "", *software, ""])


def _citation(facts: Facts) -> str:
    from nbtools import trainers

    cites = [_CITATIONS["grpo"]] + ([trainers.CITATIONS[facts.setup.trainer]]
                                    if facts.setup.trainer in trainers.CITATIONS else [])
    out = ["## Citation", "", "**BibTeX:**", ""]
    for what, bib in cites:
        out += [f"{what}:", "", "```bibtex", bib, "```", ""]
    return "\n".join(out)


def body(facts: Facts, evaluation: str, folder: str, files: Sequence[str], *, versions: Mapping[str, str],
         written: str, arch: Mapping[str, Any] | None = None) -> str:
    """The Markdown under the front matter, in the Hub's model card template's order (``huggingface_hub``'s
    ``templates/modelcard_template.md``); ``evaluation`` is the section from :func:`evaluation_section`.
    ``folder`` is unused by the text (kept for callers); tooling notes stay in ``Card.notes``, not here."""
    del folder
    t = facts.training
    hours = f"{t.gpu_hours:.1f} GPU-hours" if t.gpu_hours is not None else "n/a (no GPUs, or no event times)"
    impact = environmental_impact(md(facts.setup.cluster), hours, facts.region)
    return "\n".join([_details(facts, arch or {}), _uses(facts), _usage(facts), _training(facts, files),
                      evaluation + "\n", impact, _technical(facts, versions), _citation(facts),
                      f"## More Information\n\n{md(written)}\n"])
