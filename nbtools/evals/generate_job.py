"""The evaluation jobs of a trainer whose eval plan is ``generate-job`` (verl): ``nbtools.evals.vllm_generate`` as a
Ray job in the trainer's image, over the test split its preparation job wrote, one job per model.

Why: notebook 07 compares baseline and fine-tuned per problem; with the same program, problems, decoding and scorer
for both, and the output in NeMo-RL's run_eval.py format, ``evals.collect`` and the paired statistics work unchanged.

Example:
    >>> base, tuned = nbtools.evals.generate_jobs(cfg)
    >>> base.entrypoint
    'python3 -m nbtools.evals.vllm_generate --data /data/gsm8k/test.parquet --model Qwen/Qwen2.5-32B-Instruct ...'
"""

from __future__ import annotations

import hashlib
import posixpath

from nbtools import backends, trainers
from nbtools._escape import sh
from nbtools._layout import finetuned_model_path
from nbtools.config import Experiment
from nbtools.errors import ConfigError, Fix
from nbtools.evals.job import EvalJob, EvalJobs, _slug, local_model_path
from nbtools.evals.one_job import in_one_job
from nbtools.trainers.verl.prepare import targets

__all__ = ["build_generate_job", "generate_jobs", "generate_together", "response_length"]


def build_generate_job(cfg: Experiment, model_name: str, *, label: str, num_tests_per_prompt: int = 1,
                       temperature: float = 0.0, max_new_tokens: int | None = None,
                       copy_to_local: bool | None = None, local_name: str | None = None) -> EvalJob:
    """Build (not submit) the generation job for one model (a Hub id or an HF directory on the shared mount).

    Args:
        cfg: the experiment (its test split, GPUs per node, generation length, HF cache).
        model_name: what the job loads.
        label: names the submission id and the save path (``<dirname(log_dir)>/eval/test_<label>``).
        num_tests_per_prompt: samples per problem.
        temperature: 0 for greedy (then one sample).
        max_new_tokens: the answer's token budget; default the run's response length (``data.max_response_length``,
            verl's 512 when unset), what training generated with.
        copy_to_local: load from the GPU node's local disk (copied by :meth:`EvalJob.prepare`), not via gcsfuse mmap;
            default: on GKE for a model under the gcsfuse mount (the merged model).
        local_name: names the local copy's folder (default ``label``): the same name for the same model shares one
            copy between its evaluations (``nbtools.evals.evaluate`` passes the model's, not the decoding's).

    Raises:
        ConfigError: greedy with several samples, or fewer than one sample.
    """
    if num_tests_per_prompt < 1 or (temperature == 0 and num_tests_per_prompt > 1):
        raise ConfigError(f"num_tests_per_prompt={num_tests_per_prompt} at temperature={temperature}: greedy decoding "
                          "gives one answer", fix=Fix("num_tests_per_prompt=1 for greedy, or a temperature > 0 to sample "
                                                      "several", cli="one sample per problem for greedy decoding, or a "
                                                      "temperature above 0 to sample several"))
    _, _, test = targets(cfg)
    length_from = "given"
    if max_new_tokens is None:
        max_new_tokens, length_from = response_length(cfg), "the run's response length (data.max_response_length)"
    save_path = posixpath.join(posixpath.dirname(str(cfg.log_dir).rstrip("/")), "eval", f"test_{_slug(label)}")
    from nbtools.checkpoints import copy_to_local_disk_command  # torch-heavy: only where a copy is built
    from nbtools.jobs.carry import carry_env

    copy = backends.get(cfg).slow_mount(model_name) if copy_to_local is None else bool(copy_to_local)
    loaded = local_model_path(cfg, model_name, local_name or label) if copy else model_name
    args = ["--data", test, "--model", loaded, "--save-path", save_path, "--n", str(num_tests_per_prompt),
            "--temperature", str(float(temperature)), "--max-tokens", str(max_new_tokens), "--seed", str(cfg.grpo.seed),
            "--tensor-parallel-size", str(cfg.model.tensor_parallel_size)]
    python = cfg.trainer.python or "python3"
    entrypoint = _entrypoint(python, args)
    digest = hashlib.sha256(entrypoint.encode()).hexdigest()[:8]
    env = {"PYTHONUNBUFFERED": "1", **({"HF_HOME": cfg.storage.hf_home} if cfg.storage.hf_home else {})}
    metadata = {"nbtools": "eval", "experiment": cfg.name, "label": label, "model": model_name[:200], "dataset": test}
    return EvalJob(label=label, model_name=model_name, dataset_name=test, num_tests_per_prompt=num_tests_per_prompt,
                   temperature=float(temperature), save_path=save_path, config="nbtools.evals.vllm_generate",
                   overrides=tuple(args), entrypoint=entrypoint, submission_id=f"{cfg.name}-eval-test-{_slug(label)}-{digest}",
                   address=cfg.dashboard_url, runtime_env=carry_env(env), metadata=metadata,
                   local_copy=tuple(copy_to_local_disk_command(model_name, loaded)) if copy else (),
                   length=int(max_new_tokens), length_from=length_from,
                   # vLLM runs in this driver: it needs the GPUs, so Ray must start it on a GPU node, not the head
                   entrypoint_num_gpus=int(cfg.model.tensor_parallel_size))


def _entrypoint(python: str, args: list[str]) -> str:
    return f"{sh(python)} -u -m {_PROGRAM} " + " ".join(sh(a) for a in args)


_PROGRAM = "nbtools.evals.vllm_generate"
_PER_DECODING = ("--save-path", "--n", "--temperature")


def generate_together(specs: list[EvalJob] | tuple[EvalJob, ...]) -> EvalJob:
    """One generation job for a model's decodings (``build_generate_job`` specs of one model): ``vllm_generate``
    starts one engine and runs each decoding into its own save path (``--n 1 8 --temperature 0 1 --save-path A B``),
    instead of a job and an engine start per decoding (minutes each on a real model).

    Example:
        >>> job = generate_together([build_generate_job(cfg, m, label="fine-tuned-greedy"),
        ...                          build_generate_job(cfg, m, label="fine-tuned-sampled8", num_tests_per_prompt=8, temperature=1.0)])
    """
    specs = tuple(specs)
    if len({tuple(a for i, a in enumerate(s.overrides) if _flag_of(s.overrides, i) not in _PER_DECODING) for s in specs}) > 1:
        raise ConfigError(f"generate_together: {[s.label for s in specs]} differ in more than their decodings (model, "
                          "data, length, seed); fix: one job per model and settings")
    args = list(specs[0].overrides)
    for flag in _PER_DECODING:
        i = args.index(flag)
        args[i + 1 : i + 2] = [s.overrides[s.overrides.index(flag) + 1] for s in specs]
    python = specs[0].entrypoint.split(f" -u -m {_PROGRAM} ", 1)[0]
    return in_one_job(specs, entrypoint=f"{python} -u -m {_PROGRAM} " + " ".join(sh(a) for a in args))


def _flag_of(args: tuple[str, ...], i: int) -> str | None:
    """The flag whose value ``args[i]`` is, or the flag itself (args alternate flag, value)."""
    return args[i - 1] if i % 2 else args[i]


# verl's default answer budget when a run does not set data.max_response_length: 512 at v0.7.0 and v0.9.0
# (verl/trainer/config/_generated_ppo_trainer.yaml, `data.max_response_length: 512`)
VERL_DEFAULT_RESPONSE_LENGTH = 512


def response_length(cfg: Experiment) -> int:
    """The answer budget the verl run trained with (``data.max_response_length`` as its command sets it): the
    evaluation generates as long as training did, not the whole sequence length."""
    from nbtools.trainers import verl

    value = verl.effective(cfg).get("data.max_response_length")
    try:
        return int(value) if value is not None else VERL_DEFAULT_RESPONSE_LENGTH
    except ValueError:
        raise ConfigError(f"data.max_response_length={value!r} in trainer.overrides is not a number of tokens") from None


def generate_jobs(cfg: Experiment, *, num_tests_per_prompt: int = 1, temperature: float = 0.0,
                  max_new_tokens: int | None = None) -> EvalJobs:
    """The baseline and fine-tuned (merged) jobs, built the same way (labels ``<which>-<greedy|sampledN>``).

    Example:
        >>> base_job, tuned_job = generate_jobs(cfg)
    """
    mode = "greedy" if temperature == 0 else f"sampled{num_tests_per_prompt}"
    models = {"baseline": trainers.get(cfg).baseline_model(), "fine-tuned": finetuned_model_path(cfg)}
    return EvalJobs(build_generate_job(cfg, model, label=f"{which}-{mode}", num_tests_per_prompt=num_tests_per_prompt,
                                       temperature=temperature, max_new_tokens=max_new_tokens)
                    for which, model in models.items())
