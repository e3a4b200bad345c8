"""Cluster evaluation: build and submit NeMo-RL's `examples/run_eval.py` as a Ray job, then collect its results.

Why: the tutorial way is `kubectl exec … ray job submit … run_eval.py <12 overrides>` typed by hand per model;
here the command is built from the experiment config, validated against the targeted NeMo-RL version
(dataset names changed case between releases; run_eval.py takes plain OmegaConf dotlist, no `+`/`++`),
shown exactly, and submitted through `nbtools.jobs` so a re-run re-attaches.

Example:
    >>> job = nbtools.evals.build_eval_job(cfg, "google/gemma-3-1b-it", label="baseline", dataset="math500")
    >>> job.entrypoint
    'cd /opt/nemo-rl && python -u examples/run_eval.py --config examples/configs/evals/math_eval.yaml ...'
"""

from __future__ import annotations

import difflib
import hashlib
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from nbtools import backends
from nbtools._escape import html as _h
from nbtools._escape import sh
from nbtools._layout import finetuned_model_path
from nbtools.config import Experiment
from nbtools.errors import ConfigError, Fix, NotFoundError, NotReadyError
from nbtools.evals.parse import ScoreBlock, load_eval_config, load_evaluation_data, parse_score_blocks
from nbtools.evals.result import EvalResult

__all__ = ["EvalJob", "EvalJobs", "build_eval_job", "finetuned_model_path", "eval_jobs", "collect", "dataset_names", "validate_overrides", "NEMO_RL_ROOT",
           "generation_length", "eval_length", "BENCHMARK_LENGTHS", "local_model_path"]

NEMO_RL_ROOT = "/opt/nemo-rl"  # the code checkout inside the NeMo-RL image
LOCAL_MODELS = "/tmp/nbtools-models"  # where EvalJob.prepare copies a model on each pod's local disk
_MMLU_LANGS = ["AR-XY", "BN-BD", "DE-DE", "ES-LA", "FR-FR", "HI-IN", "ID-ID", "IT-IT", "JA-JP", "KO-KR", "PT-BR",
               "ZH-CN", "SW-KE", "YO-NG"]
_COMMON = ["math", "math500", "gpqa", "gpqa_diamond", "mmlu", "mmlu_pro", *(f"mmlu_{x}" for x in _MMLU_LANGS)]
# Built-in data.dataset_name values of run_eval.py per NeMo-RL release: the branches of load_eval_dataset() in
# nemo_rl/data/datasets/eval_datasets/__init__.py at the tag. v0.5.0: `aime2024`/`aime2025` (lower case); v0.7.0 adds
# `aime2026` and the multimodal `mmau` (also `TwinkStart/MMAU`, its HF id); the releases' own
# examples/configs/evals/eval.yaml default to "aime2024". Any other name falls through to LocalMathDataset, which
# loads it as a file or HF dataset id: `AIME2024` (the *training* registry's spelling) is not an eval dataset there.
# NeMo-RL main (not a release yet) drops the aime branches (AIME goes through the response-dataset registry as
# `AIME2024`, nemo_rl/data/datasets/response_datasets/__init__.py) and adds `daily-omni`: a row for it comes with
# the release.
_DATASETS = {
    "v0.5.0": [*_COMMON, "aime2024", "aime2025"],
    "v0.7.0": [*_COMMON, "aime2024", "aime2025", "aime2026", "mmau"],
}
# The generation length each benchmark was scored at where a tutorial published its numbers: an evaluation of that
# benchmark uses it unless the caller names another, so the scores compare with the tutorial's. Tutorial 000 (Gemma-3-1B
# GRPO on B200, NeMo-RL) printed `dataset_name='math500' max_new_tokens=8192` for both of its MATH-500 scores
# (0.4020 -> 0.4640). run_eval.py's own math_eval.yaml keeps 2048, which truncates the long answers and lowers both.
BENCHMARK_LENGTHS: dict[str, tuple[int, str]] = {
    "math500": (8192, "MATH-500 as tutorial 000 scored it"),
}
# Top-level sections of examples/configs/evals/eval.yaml; a typo elsewhere is silently accepted (extra="allow")
_SECTIONS = {"eval", "generation", "tokenizer", "data", "env", "cluster", "logger"}


def dataset_names(nemo_rl_version: str) -> list[str]:
    """Built-in `data.dataset_name` values of run_eval.py for a NeMo-RL version.

    Example:
        >>> "aime2024" in dataset_names("v0.7.0"), "AIME2024" in dataset_names("v0.7.0")
        (True, False)
    """
    if nemo_rl_version not in _DATASETS:
        raise ConfigError(f"images.nemo_rl_version: unknown {nemo_rl_version!r}; known {sorted(_DATASETS)}")
    return list(_DATASETS[nemo_rl_version])


def _check_dataset(name: str, version: str) -> None:
    if "/" in name or re.search(r"\.(json|jsonl|parquet|csv)$", name):
        return  # a local file or HF dataset id: run_eval.py loads it as such
    known = dataset_names(version)
    if name in known:
        return
    same_case = [k for k in known if k.lower() == name.lower()]
    hint = same_case or difflib.get_close_matches(name, known, n=3)
    fix = f"use {hint[0]!r}" if hint else "pass a local file path or an HF dataset id, or one of the names above"
    raise ConfigError(
        f"data.dataset_name: {name!r} is not a run_eval.py dataset in NeMo-RL {version} "
        f"(known: {', '.join(known)}); fix: {fix}"
        + ("; run_eval.py's AIME names are lower case (`AIME2024` is the training registry's spelling and would fall "
           "through to the local-file loader)" if name.lower().startswith("aime") else "")
    )


def validate_overrides(overrides: list[str]) -> list[str]:
    """Check `key=value` dotlist overrides for run_eval.py; return them unchanged. Every problem is reported.

    Example:
        >>> validate_overrides(["generation.vllm_kwargs.block_size=32"])
        ['generation.vllm_kwargs.block_size=32']
    """
    problems = []
    for o in overrides:
        key = o.split("=", 1)[0]
        if o.startswith("+"):
            problems.append(f"{o!r}: run_eval.py parses overrides with plain OmegaConf dotlist, which has no "
                            f"'+'/'++' prefix; fix: write {o.lstrip('+')!r}")
        elif "=" not in o or not key:
            problems.append(f"{o!r}: expected key=value; fix: e.g. 'generation.vllm_cfg.max_model_len=8192'")
        elif key.split(".")[0] not in _SECTIONS:
            problems.append(f"{o!r}: unknown top-level section {key.split('.')[0]!r} (known: {', '.join(sorted(_SECTIONS))}); "
                            f"run_eval.py would silently ignore it")
    if problems:
        raise ConfigError(problems)
    return list(overrides)


@dataclass(frozen=True)
class EvalJob:
    """A run_eval.py Ray job, ready to submit: the exact entrypoint, id, runtime env and where results land."""

    label: str
    model_name: str
    dataset_name: str
    num_tests_per_prompt: int
    temperature: float
    save_path: str
    config: str
    overrides: tuple[str, ...]
    entrypoint: str
    submission_id: str
    address: str
    runtime_env: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    local_copy: tuple[str, ...] = ()  # argv run first in the pods that read the model: the model to their local disk
    length: int | None = None  # the generation length it runs with (run_eval.py's max_model_len, vllm_generate's max tokens)
    length_from: str = ""  # where that length came from, for 07's settings table: "given", a benchmark, the experiment
    entrypoint_num_gpus: float = 0  # GPUs for the driver: >0 puts it on a GPU worker (Ray's placement), else the head
    parts: tuple[EvalJob, ...] = ()  # the evaluations this one job runs in order (one per decoding): evals.one_job

    @property
    def copy_to(self) -> str | None:
        """The pods :meth:`prepare` copies to (``exec_on``'s node type): where the job's processes read the model.

        The driver runs where Ray puts it: on the head (GPU-less on KubeRay) unless it asks for GPUs. run_eval.py's
        driver loads the tokenizer from ``generation.model_name`` there and its vLLM workers load the weights on the GPU
        workers, so every pod (None); a driver that runs vLLM itself asks for GPUs and only the workers need it.
        """
        return "worker" if self.entrypoint_num_gpus else None

    def prepare(self, cfg: Any, *, timeout: float = 3600) -> list[Any]:
        """Copy the model to the local disk of every pod that reads it (``local_copy`` on :attr:`copy_to`), before
        :meth:`submit`.

        Why: vLLM loads safetensors with mmap, which over gcsfuse can crawl or crash (notebook 06 says so; tutorial
        000 copies to the workers' disks, after merging on the head). Each pod has its own disk, so the copy goes where
        the job's processes run. The copy is checked and skipped when already there.

        Raises:
            NotReadyError: a pod's copy failed (its output says why).
        """
        if not self.local_copy:
            return []
        done = backends.get(cfg).exec_on(list(self.local_copy), node_type=self.copy_to, timeout=timeout)
        bad = [r for r in done if r.returncode != 0]
        if bad:
            raise NotReadyError(f"copying the model to local disk failed in pod(s) {[r.pod for r in bad]}: "
                                f"{(bad[0].stderr or bad[0].stdout).strip()[-500:]}",
                                fix="check the pods' free disk (kubectl exec ... df -h /tmp) and that the merged model "
                                    "is complete (nbtools.checkpoints.verify), then run again")
        return done

    def to_command(self) -> str:
        """The equivalent `ray job submit` command, to copy into a terminal."""
        gpus = f" --entrypoint-num-gpus {self.entrypoint_num_gpus:g}" if self.entrypoint_num_gpus else ""
        return (f"ray job submit --address {sh(self.address)} --submission-id {sh(self.submission_id)}"
                f"{gpus} -- {self.entrypoint}")

    def submit(self):
        """Submit through `nbtools.jobs.submit` (re-attaches when this submission id already exists).

        Example:
            >>> job = spec.submit(); job.wait(timeout=3600)
        """
        from nbtools import jobs

        return jobs.submit(self.address, entrypoint=self.entrypoint, submission_id=self.submission_id,
                           runtime_env=self.runtime_env or None, metadata=self.metadata,
                           entrypoint_num_gpus=self.entrypoint_num_gpus or None)

    def _repr_html_(self) -> str:
        if self.parts:
            return (f"<b>One job</b> <code>{_h(self.submission_id)}</code> for {len(self.parts)} evaluations:<hr>"
                    + "<hr>".join(p._repr_html_() for p in self.parts))
        return (f"<b>NeMo-RL eval job</b> <code>{_h(self.submission_id)}</code>: "
                f"{_h(self.label)} = <code>{_h(self.model_name)}</code> on "
                f"<b>{_h(self.dataset_name)}</b>, n={self.num_tests_per_prompt}, T={self.temperature}<br>"
                f"results → <code>{_h(self.save_path)}</code>"
                f"<pre style='white-space:pre-wrap'>{_h(self.to_command())}</pre>")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:40] or "model"


def build_eval_job(
    cfg: Experiment,
    model_name: str,
    *,
    label: str | None = None,
    dataset: str = "math500",
    num_tests_per_prompt: int = 1,
    temperature: float | None = None,
    max_model_len: int | None = None,
    save_path: str | None = None,
    config: str = "examples/configs/evals/math_eval.yaml",
    overrides: list[str] | tuple[str, ...] = (),
    copy_to_local: bool | None = None,
    local_name: str | None = None,
) -> EvalJob:
    """Build (not submit) NeMo-RL's run_eval.py job for one model.

    Args:
        cfg: the experiment (`nbtools.config.load(...)`): NeMo-RL version, GPUs per node, vllm_kwargs, paths.
        model_name: HF model directory on the cluster (e.g. the merged checkpoint) or an HF id.
        label: short name used in the submission id and save path (default: the model's basename).
        dataset: `data.dataset_name`, validated for `cfg.images.nemo_rl_version`.
        num_tests_per_prompt: samples per problem (`eval.num_tests_per_prompt`).
        temperature: default 0.0 (greedy) for one sample, 1.0 for several.
        max_model_len: `generation.vllm_cfg.max_model_len` (what the score block calls max_new_tokens); default: the
            benchmark's published length (``BENCHMARK_LENGTHS``: MATH-500 at 8192, as tutorial 000's 0.4020 -> 0.4640),
            else the experiment's own generation length (``trainer.vllm_cfg.max_model_len``, else
            ``model.max_total_sequence_length``), never the eval config's silent 2048: scores depend on it.
        save_path: `eval.save_path`; default `<dirname(log_dir)>/eval/<dataset>_<label>` on the shared mount.
        config: eval config relative to the NeMo-RL checkout.
        overrides: extra dotlist overrides, e.g. `generation.vllm_kwargs.block_size=32` (no `+`/`++`).
        copy_to_local: load the model from the pods' local disks (copied there by :meth:`EvalJob.prepare`), not
            through gcsfuse with mmap; default: on GKE for a model under the gcsfuse mount (the merged model).
        local_name: names the local copy's folder (default ``label``): the same name for the same model shares one
            copy between its evaluations (``nbtools.evals.evaluate`` passes the model's, not the decoding's).

    Returns:
        EvalJob with `.entrypoint`, `.to_command()`, `.submit()`.

    Raises:
        ConfigError: unknown dataset for that NeMo-RL version, bad override, bad n/temperature.

    Example:
        >>> build_eval_job(cfg, cfg.model.name, label="baseline").to_command()
    """
    version = cfg.images.nemo_rl_version
    _check_dataset(dataset, version)
    if num_tests_per_prompt < 1:
        raise ConfigError(f"eval.num_tests_per_prompt must be >= 1, got {num_tests_per_prompt}")
    if temperature is None:
        temperature = 0.0 if num_tests_per_prompt == 1 else 1.0
    label = label or _slug(posixpath.basename(model_name.rstrip("/")))
    if save_path is None:
        save_path = posixpath.join(posixpath.dirname(str(cfg.log_dir).rstrip("/")), "eval", f"{_slug(dataset)}_{_slug(label)}")
    from nbtools.checkpoints import copy_to_local_disk_command  # torch-heavy: only where a copy is built

    copy = backends.get(cfg).slow_mount(model_name) if copy_to_local is None else bool(copy_to_local)
    loaded = local_model_path(cfg, model_name, local_name or label) if copy else model_name
    ours = [
        f"generation.model_name={loaded}",
        f"data.dataset_name={dataset}",
        f"eval.num_tests_per_prompt={num_tests_per_prompt}",
        f"eval.save_path={save_path}",
        f"generation.temperature={temperature}",
        "cluster.num_nodes=1",
        f"cluster.gpus_per_node={cfg.cluster.gpus_per_node}",
        *(f"generation.vllm_kwargs.{k}={v}" for k, v in sorted(cfg.trainer.vllm_kwargs.items())),
    ]
    max_model_len, length_from = eval_length(cfg, dataset, max_model_len)
    ours.append(f"generation.vllm_cfg.max_model_len={max_model_len}")
    user = validate_overrides(list(overrides))
    user_keys = {o.split("=", 1)[0] for o in user}
    final = tuple(o for o in ours if o.split("=", 1)[0] not in user_keys) + tuple(user)
    code_dir, python = cfg.trainer.code_dir or NEMO_RL_ROOT, cfg.trainer.python or "python"
    entrypoint = (f"cd {sh(code_dir)} && {sh(python)} -u examples/run_eval.py --config {sh(config)} "
                  + " ".join(sh(o) for o in final))
    digest = hashlib.sha256(entrypoint.encode()).hexdigest()[:8]
    submission_id = f"{cfg.name}-eval-{_slug(dataset)}-{_slug(label)}-{digest}"

    env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
    if cfg.storage.hf_home:  # the same cache as training: a model downloads once per cluster
        env["HF_HOME"] = cfg.storage.hf_home
    metadata = {"nbtools": "eval", "experiment": cfg.name, "label": label, "model": model_name[:200], "dataset": dataset}
    return EvalJob(label=label, model_name=model_name, dataset_name=dataset, num_tests_per_prompt=num_tests_per_prompt,
                   temperature=float(temperature), save_path=save_path, config=config, overrides=final,
                   entrypoint=entrypoint, submission_id=submission_id, address=cfg.dashboard_url,
                   runtime_env={"env_vars": env}, metadata=metadata,
                   local_copy=tuple(copy_to_local_disk_command(model_name, loaded)) if copy else (),
                   length=max_model_len, length_from=length_from)


def local_model_path(cfg: Any, model_name: str, name: str) -> str:
    """Where :meth:`EvalJob.prepare` copies ``model_name`` on a pod's local disk: ``<LOCAL_MODELS>/<experiment>/<name>/
    <basename>``. Evaluations that name the same model alike (greedy and sampled of "fine-tuned") share one copy: the
    second finds it up to date instead of copying the model again beside it."""
    return posixpath.join(LOCAL_MODELS, cfg.name, _slug(name), posixpath.basename(model_name.rstrip("/")))


def eval_length(cfg: Any, dataset: str, given: int | None = None) -> tuple[int, str]:
    """The generation length an evaluation of ``dataset`` runs at, and why: the caller's, else the benchmark's
    published one (``BENCHMARK_LENGTHS``: MATH-500 at 8192, as tutorial 000 scored it), else the experiment's own.

    Example:
        >>> eval_length(cfg, "math500")
        (8192, 'MATH-500 as tutorial 000 scored it')
    """
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise ConfigError(f"max_model_len must be a positive number of tokens, got {given!r}")
        return given, "given"
    if dataset in BENCHMARK_LENGTHS:
        return BENCHMARK_LENGTHS[dataset]
    return generation_length(cfg), "the experiment's generation length"


def generation_length(cfg: Any) -> int:
    """The experiment's vLLM ``max_model_len`` (prompt + answer): what an evaluation should generate with too."""
    v = (cfg.trainer.vllm_cfg or {}).get("max_model_len")
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else int(cfg.model.max_total_sequence_length)


class EvalJobs(list):
    """A list of EvalJob that displays every job's exact command in a notebook."""

    def _repr_html_(self) -> str:
        return "<hr>".join(j._repr_html_() for j in self)


def eval_jobs(cfg: Experiment, *, dataset: str = "math500", num_tests_per_prompt: int = 1,
              temperature: float | None = None, **kwargs: Any) -> EvalJobs:
    """The baseline (`cfg.model.name`) and fine-tuned (merged) jobs, built the same way.

    Labels are `<baseline|fine-tuned>-<greedy|sampledN>`, the ones `nbtools.evals.evaluate` submits.

    Example:
        >>> base_job, tuned_job = eval_jobs(cfg, dataset="math500")
    """
    if temperature is None:
        temperature = 0.0 if num_tests_per_prompt == 1 else float(getattr(cfg.grpo, "temperature", 1.0) or 1.0)
    mode = "greedy" if temperature == 0 else f"sampled{num_tests_per_prompt}"
    models = {"baseline": cfg.model.name, "fine-tuned": finetuned_model_path(cfg)}
    return EvalJobs(
        build_eval_job(cfg, model, label=f"{which}-{mode}", dataset=dataset, num_tests_per_prompt=num_tests_per_prompt,
                       temperature=temperature, **kwargs)
        for which, model in models.items()
    )


def collect(log_or_job: Any, *, save_path: str | Path | None = None, n: int | None = None,
            temperature: float | None = None) -> EvalResult:
    """Turn a finished run_eval.py job (or its log text) into an EvalResult.

    The score comes from the last printed block (with ``n``/``temperature``: the last one of that decoding, for a job
    that ran several, :func:`in_one_job`); per-sample rows come from `save_path`'s evaluation_data.json —
    a local dir or the URL where this machine reads it (``cfg.url(spec.save_path)``, ``gs://…`` on GKE) — which
    enables the paired comparison.

    Example:
        >>> res = collect(job, save_path=spec.save_path)
    """
    text = log_or_job if isinstance(log_or_job, str) else log_or_job.logs()
    blocks = parse_score_blocks(text)
    if not blocks:
        raise NotFoundError(
            "expected NeMo-RL's score block (model_name=… / score=…) in the eval job log, found none",
            fix=Fix("wait for the job to finish (job.wait(timeout=...)) and check job.status(); the block is printed last",
                    cli="wait for the job to finish (`nbtools jobs status EXPERIMENT.yaml --id ID`); the block is "
                        "printed last"),
        )
    if n is not None or temperature is not None:
        blocks = [b for b in blocks if (n is None or b.num_tests_per_prompt == n)
                  and (temperature is None or abs(b.temperature - temperature) < 1e-9)] or _no_block(blocks, n, temperature)
    block: ScoreBlock = blocks[-1]
    table = pd.DataFrame(columns=["problem_id", "sample", "prompt", "response", "extracted_answer", "correct"])
    params: dict[str, Any] = {"n": block.num_tests_per_prompt, "temperature": block.temperature, "top_p": block.top_p,
                              "top_k": block.top_k, "max_new_tokens": block.max_new_tokens, "seed": block.seed}
    if save_path is not None:
        from nbtools import storage

        try:  # a local dir, or the bucket the pods wrote to (gs://…): copied once per generation; one listing and
            # one read (each a Ray job on a cluster whose storage only it sees), no stat before them
            local = storage.mirror(str(save_path), include=lambda rel: rel in ("evaluation_data.json", "config.json"))
        except NotFoundError:
            local = None
        if local is not None and (local / "evaluation_data.json").is_file():
            table = load_evaluation_data(local, num_tests_per_prompt=block.num_tests_per_prompt)
            if "extracted_answer" not in table.columns:
                table.insert(4, "extracted_answer", None)
            params.update(load_eval_config(local))
    return EvalResult(table=table, model=block.model_name, params=params, score_block=block)


def _no_block(blocks: list[ScoreBlock], n: int | None, temperature: float | None):
    seen = [(b.num_tests_per_prompt, b.temperature) for b in blocks]
    raise NotFoundError(f"expected a score block with num_tests_per_prompt={n} temperature={temperature} in the eval job "
                        f"log, found only {seen}", fix="collect the job that ran this decoding (its submission id)")
