"""nbtools.card: the Hugging Face model card beside a merged model, built from a real miniature run.

The run is made of real parts: the rehearsal's tiny Llama (built in code), NeMo-RL-shaped checkpoints merged by
``nbtools.checkpoints.merge``, TensorBoard events written by the rehearsal's logger, and ``EvalResult``/``Comparison``
objects from ``nbtools.evals``. The card is read back only through huggingface_hub's own classes.
"""

from __future__ import annotations

import io
import json
import os
import re
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import nbtools
from nbtools.errors import ConfigError, ConflictError, NotFoundError

SMALL = {"rehearsal.hidden_size": 16, "rehearsal.intermediate_size": 32, "rehearsal.num_layers": 1}
VAL = {10: 0.5, 20: 0.9, 30: 0.8}  # validation accuracy at each saved step: step_20 is the best


def _build_run(root: Path):
    """A finished miniature run under root: baseline, TensorBoard events, three checkpoints, the best one merged."""
    from nbtools.rehearsal import artifacts
    from nbtools.rehearsal import model as rm

    cfg = nbtools.config.load(Path(__file__).parents[2] / "experiments" / "local.yaml", overrides=SMALL)
    assert cfg.runs_dir == root / "runs"
    tok = rm.build_tokenizer()
    run = cfg.run_dir
    run.mkdir(parents=True, exist_ok=True)
    exp = artifacts.next_experiment_dir(cfg.log_dir)
    log = artifacts.MetricsLogger(exp)
    for s in range(1, 31):
        log.log_metrics({"reward": 0.1 + s / 40, "mean_gen_tokens_per_sample": 12 - s / 10, "kl_penalty": 0.001 * s}, s,
                        "train")
        if s in VAL:
            log.log_metrics({"accuracy": VAL[s]}, s, "validation")
    log.close()
    for s, acc in VAL.items():
        d = Path(cfg.checkpoint_dir) / f"step_{s}"
        rm.build_model(cfg, tok, seed=s).save_pretrained(d / "policy" / "weights" / "model" / "consolidated")
        tok.save_pretrained(d / "policy" / "tokenizer")
        (d / "training_info.json").write_text(json.dumps({"current_step": s, "val:accuracy": acc, "val_reward": acc}))
        (d / "config.yaml").write_text(yaml.safe_dump(artifacts.nemo_rl_config(cfg, exp, world_size=2)))
    step = nbtools.checkpoints.best(cfg.checkpoint_dir, cfg.checkpointing.metric_name)
    result = nbtools.checkpoints.merge(step, run / "merged_hf", progress=False)
    return cfg, result


def _result(p: float, n: int, seed: int) -> nbtools.evals.EvalResult:
    rng = np.random.default_rng(seed)
    rows = [{"problem_id": f"max3-{i:03d}", "sample": s, "correct": bool(rng.random() < p)} for i in range(80)
            for s in range(n)]
    return nbtools.evals.EvalResult(table=pd.DataFrame(rows))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("card")
    mp = pytest.MonkeyPatch()
    mp.setenv("NBTOOLS_RUNS_DIR", str(root / "runs"))
    cfg, result = _build_run(root)
    greedy = nbtools.evals.compare(_result(0.2, 1, 1), _result(0.8, 1, 2), alpha=0.01)
    sampled = nbtools.evals.compare(_result(0.3, 4, 3), _result(0.6, 4, 4), alpha=0.01)
    yield {"root": root, "cfg": cfg, "merge": result, "out": result.out, "greedy": greedy, "sampled": sampled}
    mp.undo()


def _front(path: Path) -> dict:
    return yaml.safe_load(path.read_text().split("---\n")[1])


def test_card_round_trips_and_its_model_index_reads_back_with_the_comparisons_numbers(run, monkeypatch):
    import huggingface_hub
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    def never(*a, **k):
        raise AssertionError("nbtools.card must never publish")

    monkeypatch.setattr(huggingface_hub, "upload_folder", never)
    monkeypatch.setattr(huggingface_hub, "create_repo", never)
    cmp = {"greedy": run["greedy"], "sampled (n=4)": run["sampled"]}
    card = nbtools.card.write(run["cfg"], run["out"], merge=run["merge"], comparisons=cmp)

    loaded = ModelCard.load(run["out"] / "README.md")
    assert loaded.data.base_model == "nbtools/tiny-llama-max3" and loaded.data.library_name == "transformers"
    assert loaded.data.license == "apache-2.0" and {"grpo", "reinforcement-learning", "nbtools"} <= set(loaded.data.tags)
    name, results = model_index_to_eval_results(_front(run["out"] / "README.md")["model-index"])
    assert name == "local-rehearsal" and len(results) == 2 == card.evaluations
    for (label, c), r in zip(cmp.items(), results, strict=True):
        assert r.metric_type == "accuracy" and r.metric_name == f"{label} accuracy" and r.metric_value == c.acc_b
        assert r.metric_args is None and r.metric_config is None  # args: the metric's own arguments only (Hub spec)
        assert r.dataset_type == "max3" and r.dataset_split == "held-out" and r.task_type == "text-generation"
    metrics = [m for res in _front(run["out"] / "README.md")["model-index"][0]["results"] for m in res["metrics"]]
    assert all(set(m) <= {"type", "value", "name", "config", "args", "verified"} for m in metrics) and all(
        "args" not in m for m in metrics)
    assert [r.metric_value for r in loaded.data.eval_results] == [c.acc_b for c in cmp.values()]
    body = loaded.text
    # the intervals, test, p-value and α moved from the model-index into the evaluation section's results table
    evaluation = body[body.index("## Evaluation"):body.index("## Technical Specifications")]
    for label, c in cmp.items():
        row = next(line for line in evaluation.splitlines() if line.startswith(f"| {label} |"))
        assert f"{c.acc_b:.3f} [{c.ci_b[0]:.3f}, {c.ci_b[1]:.3f}]" in row and c.test in row and "| 0.01 | 80 |" in row
    assert "### Testing Data, Factors & Metrics" in evaluation and "Wilson score 95%" in evaluation
    assert "α = 0.01" in evaluation and "| 1 |" in evaluation and "| 4 |" in evaluation
    # the Hub template's sections, in its order, and no tooling notes
    order = ["## Model Details", "### Model Sources", "## Uses", "### Direct Use", "### Out-of-Scope Use",
             "## Bias, Risks, and Limitations", "## How to Get Started with the Model", "## Training Details",
             "### Training Data", "#### Training Hyperparameters", "## Evaluation", "### Results",
             "## Environmental Impact", "## Technical Specifications", "### Framework versions", "## Citation"]
    assert [body.index(h + "\n") for h in order] == sorted(body.index(h + "\n") for h in order)
    # issue 45: the template's metadata and fields that were missing
    assert loaded.data.language == ["en"] and "- **Developed by:** More Information Needed" in body
    assert "- **Repository (trainer):**" in body or "- **Paper (method):** GRPO" in body
    assert "- **Hardware Type:**" in body and "- **Carbon Emitted:** not estimated" in body
    assert any(n.startswith("Developed by:") for n in card.notes)
    cfg = run["cfg"]
    assert "| precision | float32 |" in body and f"| sequence length | {cfg.model.max_total_sequence_length} tokens" in body
    optimizer = next(line for line in body.splitlines() if line.startswith("| optimizer | "))
    assert "torch.optim.AdamW (" in optimizer and f"lr={cfg.grpo.learning_rate}" in optimizer, optimizer
    assert f"| learning-rate schedule | LinearLR warmup over {cfg.rehearsal.lr_warmup_steps} steps" in body
    import torch
    import transformers
    assert f"- transformers {transformers.__version__}" in body and f"- torch {torch.__version__}" in body
    assert f"- nbtools {nbtools.__version__}" in body
    assert "arXiv:2402.03300" in body  # GRPO's paper
    for tooling in ("Publish", "Not filled in", "upload_folder", "nbtools.card", "notebook 0", "before publishing"):
        assert tooling not in body, tooling
    assert "upload_folder(" in card.upload_call and str(run["out"]) in card.upload_call
    assert (run["out"] / "training_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](training_curves.png)" in body and "](experiment.yaml)" in body
    assert nbtools.checkpoints.verify(run["out"]).ok  # the files beside the model do not disturb its verification


def test_card_values_are_the_runs_metrics_and_the_merged_steps_reason(run):
    nbtools.card.write(run["cfg"], run["out"], merge=run["merge"])
    text = (run["out"] / "README.md").read_text()
    df = nbtools.metrics.read_tensorboard(run["cfg"].log_dir)
    reward = nbtools.metrics.select(df, "reward").sort_values("step")
    acc = nbtools.metrics.select(df, "accuracy")
    info = nbtools.checkpoints.read_training_info(run["merge"].source)
    assert f"| steps trained | {int(reward.step.max())} (max_num_steps {run['cfg'].grpo.max_num_steps}) |" in text
    assert f"| train reward | {reward.value.iloc[-1]:.4g} | {int(reward.step.iloc[-1])} |" in text
    assert f"| validation accuracy (best) | {acc.value.max():.4g} | 20 |" in text
    assert run["merge"].source.name == "step_20" and "Merged from **step_20**" in text
    assert f"the best `val:accuracy` ({info['val:accuracy']:.4f}, higher is better)" in text and "keep_top_k: 3" in text
    assert "| step_20 (merged) | 0.9000 |" in text and "| step_30 | 0.8000 |" in text
    assert "| format | 0.2 | 0.200 |" in text and "| exact_alnum | 0.8 | 0.800 |" in text
    assert f"config hash `{run['cfg'].config_hash()}`" in text
    loaded = nbtools.config.load(run["out"] / "experiment.yaml")
    assert loaded.config_hash() == run["cfg"].config_hash()  # the full experiment, reloadable
    saved = (run["out"] / "experiment.yaml").read_text()
    data = yaml.safe_load(saved)
    assert not {"gcp", "cluster", "storage", "images", "trainer"} & set(data)  # GKE-only: the CPU run never used them
    for gke_only in ("b200", "spot", "1800Gi", "a4-highgpu"):
        assert gke_only not in saved.lower(), gke_only
    assert "# Not used by this run (backend local), left out: gcp, cluster, storage, images, trainer" in saved
    assert data["rehearsal"]["ranks"] == run["cfg"].rehearsal.ranks and data["backend"] == "local"


def test_experiment_yaml_keeps_a_section_someone_set_but_marks_it_unused(run, tmp_path):
    import dataclasses

    cfg = run["cfg"]
    cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, name="my-gke-cluster"))
    nbtools.card.write(cfg, run["out"], merge=run["merge"], curves=False)
    saved = (run["out"] / "experiment.yaml").read_text()
    head, marked = saved.split("# Set in the experiment but NOT used by this run (backend local)")
    assert "cluster:" not in head and "my-gke-cluster" in marked and "gcp:" not in saved
    assert nbtools.config.load(run["out"] / "experiment.yaml").config_hash() == cfg.config_hash()
    nbtools.card.write(run["cfg"], run["out"], merge=run["merge"])  # leave the module's card as the others expect


def test_the_cards_repr_shows_no_absolute_machine_path(run):
    card = nbtools.card.write(run["cfg"], run["out"], merge=run["merge"])
    assert str(run["out"]) in card.path  # the data keeps the real path
    for shown in (repr(card), card._repr_markdown_()):
        assert str(run["root"]) not in shown and "<runs_dir>/" in shown


def test_no_token_home_path_or_secret_value_reaches_the_card(run, monkeypatch):
    sentinel = "hf_SENTINEL0123456789abcdefghij"
    wandb = "wandb_SENTINEL_abcdefghij0123456789"
    other = "sk-SENTINEL-in-env-vars-0123456789"
    home = run["root"]
    monkeypatch.setenv("HOME", str(home))  # the run lives under "home": no absolute path of it may show
    monkeypatch.setenv("HF_TOKEN", sentinel)
    monkeypatch.setenv("WANDB_API_KEY", wandb)
    monkeypatch.setenv("MY_API_TOKEN", other)
    secrets = {"secrets.hf_token": {"env": "HF_TOKEN", "k8s_secret": "hf-secret", "key": "hf_api_token"},
               "secrets.wandb_api_key": {"env": "WANDB_API_KEY"}, "model.name": str(home / "base-model")}
    (home / "base-model").mkdir(exist_ok=True)  # a base model on disk under home, whose own card names its licence
    (home / "base-model" / "README.md").write_text("---\nlicense: mit\n---\n# base\n")
    cfg, result = run["cfg"].replace(**secrets), run["merge"]
    # config.load refuses token-shaped env_vars and overrides; the card must still hold if one was built without it
    import dataclasses

    cfg = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, env_vars={"MY_API_TOKEN": other},
                                                               overrides=[f"logger.wandb.api_key={wandb}"]))
    greedy = nbtools.evals.compare(_result(0.2, 1, 1), _result(0.8, 1, 2))
    card = nbtools.card.write(cfg, result.out, merge=result, comparisons={"greedy": greedy})
    texts = {p.name: p.read_bytes() for p in result.out.iterdir() if p.name in ("README.md", "experiment.yaml",
                                                                                "training_curves.png")}
    assert len(texts) == 3 and card.files == ("experiment.yaml", "training_curves.png")
    for name, data in texts.items():
        for secret in (sentinel, wandb, other, str(home)):
            assert secret.encode() not in data, (name, secret)
    assert card.metadata["license"] == "mit" and "base_model" not in card.metadata  # a local path is no Hub id
    assert "`~/base-model`" in texts["README.md"].decode() and "~/base-model" in texts["experiment.yaml"].decode()
    exp = yaml.safe_load(texts["experiment.yaml"])
    assert exp["secrets"]["hf_token"] == {"env": "HF_TOKEN", "k8s_secret": "hf-secret", "key": "hf_api_token"}
    assert exp["trainer"]["env_vars"]["MY_API_TOKEN"].startswith("<redacted")
    assert exp["trainer"]["overrides"] == ["logger.wandb.api_key=<redacted: reference it under secrets: by name>"]

    before = (result.out / "README.md").read_text()
    leaky = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, prompt_file=f"prompts/{sentinel}.txt"))  # no redaction knows it
    with pytest.raises(ConfigError, match=r"\$HF_TOKEN.*nothing was written.*fix: remove that value") as e:
        nbtools.card.write(leaky, result.out, merge=result)
    assert sentinel not in str(e.value) and (result.out / "README.md").read_text() == before
    assert sentinel.encode() not in (result.out / "experiment.yaml").read_bytes()


def test_rewrite_replaces_atomically_and_a_failed_write_leaves_the_old_card(run, monkeypatch):
    from nbtools.card import _io

    nbtools.card.write(run["cfg"], run["out"], merge=run["merge"], curves=False)
    before = (run["out"] / "README.md").read_text()

    def replace_fails(src, dst):
        if Path(dst).name == "README.md":
            raise OSError(28, "No space left on device")
        return os.replace(src, dst)

    monkeypatch.setattr(_io.os, "replace", replace_fails)
    with pytest.raises(OSError, match="No space"):
        nbtools.card.update_evaluation(run["out"], {"greedy": run["greedy"]})
    assert (run["out"] / "README.md").read_text() == before
    assert not [p.name for p in run["out"].iterdir() if ".tmp-" in p.name]

    real_fsync = os.fsync
    calls = []

    def fsync_dies_midway(fd):
        calls.append(fd)
        raise KeyboardInterrupt  # e.g. the user interrupts the cell while the card is being written

    monkeypatch.setattr(_io.os, "replace", os.replace)
    monkeypatch.setattr(_io.os, "fsync", fsync_dies_midway)
    with pytest.raises(KeyboardInterrupt):
        nbtools.card.write(run["cfg"], run["out"], merge=run["merge"], comparisons={"greedy": run["greedy"]}, curves=False)
    monkeypatch.setattr(_io.os, "fsync", real_fsync)
    assert calls and (run["out"] / "README.md").read_text() == before
    assert not [p.name for p in run["out"].iterdir() if ".tmp-" in p.name]


def test_06_writes_07_updates_and_a_rewrite_keeps_the_evaluation_only_for_the_same_weights(run, tmp_path):
    from huggingface_hub import ModelCard

    out = run["out"]
    (out / "README.md").unlink(missing_ok=True)
    with pytest.raises(NotFoundError, match="fix: write it first: nbtools.card.write"):
        nbtools.card.update_evaluation(out, {"greedy": run["greedy"]})
    first = nbtools.card.write(run["cfg"], out, merge=run["merge"], curves=False)  # notebook 06
    assert first.evaluations == 0 and "model-index" not in first.metadata and "has not been evaluated yet" in first.text
    updated = nbtools.card.update_evaluation(out, {"greedy": run["greedy"]})  # notebook 07
    assert updated.evaluations == 1 and "Not evaluated yet" not in updated.text
    assert updated.text.split("## Evaluation")[0].split("---\n", 2)[2] == first.text.split("## Evaluation")[0].split("---\n", 2)[2]
    again = nbtools.card.write(run["cfg"], out, merge=run["merge"], curves=False)  # re-running 06: same weights, evaluation kept
    assert ModelCard.load(out / "README.md").data.eval_results[0].metric_value == run["greedy"].acc_b
    assert again.evaluations == 1
    # a new merge (other weights) with the old card copied in: the stale evaluation is dropped
    other = tmp_path / "merged_hf"
    nbtools.checkpoints.merge(Path(run["cfg"].checkpoint_dir) / "step_30", other, progress=False)
    (other / "README.md").write_text((out / "README.md").read_text())
    fresh = nbtools.card.write(run["cfg"], other, curves=False)
    assert fresh.evaluations == 0 and "has not been evaluated yet" in fresh.text and "Merged from **step_30**" in fresh.text
    assert "now step_20" in fresh.text  # honest when the merged step is not the best one on disk
    (other / "README.md").write_text("# hand-written\n")
    with pytest.raises(ConflictError, match="not written by nbtools.card"):
        nbtools.card.update_evaluation(other, {"greedy": run["greedy"]})


def test_the_cards_how_to_use_code_runs_on_the_merged_model(run):
    text = nbtools.card.write(run["cfg"], run["out"], merge=run["merge"], curves=False).text
    code = re.search(r"## How to Get Started with the Model\n\n```python\n(.*?)```", text, re.DOTALL).group(1)
    code = code.replace('"YOUR_ORG/local-rehearsal"', repr(str(run["out"])))
    buf = io.StringIO()
    with redirect_stdout(buf):
        exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the snippet a user would paste
    assert buf.getvalue().strip() != ""


def test_cli_card_writes_the_card_from_a_run_dir_with_saved_comparisons(run, capfd):
    run["greedy"].save(run["cfg"].run_dir / "eval" / "comparison_greedy.json")
    run["sampled"].save(run["cfg"].run_dir / "eval" / "comparison_sampled.json")
    assert nbtools.cli.main(["card", str(run["cfg"].run_dir), "--json"]) == 0
    out = json.loads(capfd.readouterr().out)
    assert out["evaluations"] == 2 and out["files"] == ["experiment.yaml", "training_curves.png"]
    results = out["metadata"]["model-index"][0]["results"]
    assert results[0]["metrics"][0]["value"] == run["greedy"].acc_b
    # the same label notebook 07 writes ("sampled (n=4)"), not the file's stem: the CLI and the notebook agree
    assert [m["name"] for r in results for m in r["metrics"]] == ["greedy accuracy", "sampled (n=4) accuracy"]
    (run["cfg"].run_dir / "eval" / "comparison_sampled.json").unlink()
    assert "upload_folder(" in out["upload_call"]
    assert nbtools.cli.main(["card", str(run["root"])]) == 1
    assert "fix: pass the merged model directory" in capfd.readouterr().err


def test_a_card_beside_a_model_in_a_bucket(run, tmp_path, monkeypatch):
    """The merged model where a GKE cluster wrote it: gs:// on tests/doubles/gcs_emulator.py (fake-gcs-server, a GCS
    STAND-IN). The card is built from a local copy of the small files (never the weights) and uploaded back."""
    from gcs_emulator import GcsEmulator

    from nbtools import storage

    monkeypatch.setenv("NBTOOLS_CACHE_DIR", str(tmp_path / "cache"))
    with GcsEmulator() as gcs:
        gcs.create_bucket("card-bucket")
        gcs.fs.put(str(run["out"]), "card-bucket/exp/merged_hf", recursive=True)
        url = "gs://card-bucket/exp/merged_hf"
        fetched = []
        real = storage._download
        monkeypatch.setattr(storage, "_download", lambda items: fetched.extend(u for u, _ in items) or real(items))
        card = nbtools.card.write(run["cfg"], url, merge=run["merge"], comparisons={"greedy": run["greedy"]})
        assert card.path == f"{url}/README.md" and card.evaluations == 1
        assert storage.exists(f"{url}/experiment.yaml") and storage.exists(f"{url}/training_curves.png")
        assert nbtools.card.read(url).data.eval_results[0].metric_value == run["greedy"].acc_b
        assert fetched and not any(u.endswith(".safetensors") for u in fetched)  # the card never copies the weights
        updated = nbtools.card.update_evaluation(url, {"greedy": run["greedy"], "again": run["greedy"]})
        assert updated.evaluations == 2 and len(nbtools.card.read(url).data.eval_results) == 2


HOSTILE = "x`<script>alert(1)</script> <img src=x onerror=alert(2)> **b** [l](javascript:x) <!-- open"


def test_hostile_names_and_notes_are_escaped_and_never_become_metadata(run, tmp_path):
    """#31: model and dataset names, reward kwargs, comparison notes and file names go into README.md as text."""
    import dataclasses

    from markdown_it import MarkdownIt

    cfg = run["cfg"]
    greedy = dataclasses.replace(run["greedy"], notes=[HOSTILE], verdict=HOSTILE)
    bad_data = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, dataset=HOSTILE))
    before = nbtools.card.write(cfg, run["out"], merge=run["merge"]).text
    with pytest.raises(ConfigError, match=r"(?s)evaluation dataset .* cannot name a dataset in the card's metadata.*"
                                          r"fix: pass dataset= with its Hub id"):
        nbtools.card.write(bad_data, run["out"], merge=run["merge"], comparisons={"greedy": greedy})
    assert (run["out"] / "README.md").read_text() == before  # nothing written
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, name=HOSTILE))
    card = nbtools.card.write(cfg, run["out"], merge=run["merge"], comparisons={"greedy": greedy}, dataset="my-set")
    text = (run["out"] / "README.md").read_text()
    assert "<script>" not in text and "<img" not in text
    assert text.count("<!--") == 2  # the evaluation section's own two markers, nothing else opens a comment
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(text.split("---\n", 2)[2])
    assert all("training_curves.png" in t for t in re.findall(r"<img [^>]*>", html))  # the card's own figure only
    assert set(re.findall(r"<a href=\"([^\"]*)\"", html)) == {"experiment.yaml"}  # the card's own link only
    assert "<script>" not in html and "<!--" not in html.replace("<!-- nbtools:", "").replace(
        "<!-- /nbtools:", "") and "<h2>More Information</h2>" in html  # nothing hidden down to the end of the card
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4  # shown as text: intro, tables, notes
    front = _front(run["out"] / "README.md")
    assert "base_model" not in front and "base_model" not in card.metadata  # not a Hub id: no metadata from it
    assert all(isinstance(v, str | list | dict) for v in front.values())
    nbtools.card.read(run["out"])  # still a valid card
    bad = tmp_path / "comparison_<img src=x onerror=alert(1)>.json"
    run["greedy"].save(bad) if hasattr(run["greedy"], "save") else bad.write_text(json.dumps(run["greedy"].to_dict()))
    with pytest.raises(ConfigError, match=r"comparison label '<img src=x onerror=alert\(1\)>' cannot name a metric.*"
                                          r"fix: pass \{'greedy': comparison\}"):
        nbtools.card.write(cfg, run["out"], merge=run["merge"], comparisons=[bad])
    nbtools.card.write(run["cfg"], run["out"], merge=run["merge"])  # leave the module's card as the others expect


def test_a_licence_that_is_no_hub_licence_id_never_becomes_metadata(tmp_path):
    from nbtools.card._facts import _license

    (tmp_path / "README.md").write_text("---\nlicense: \"mit <script>alert(1)</script>\"\n---\n# base\n")
    assert _license("nbtools/not-known", [tmp_path]) == (None, "unknown")
    (tmp_path / "README.md").write_text("---\nlicense: apache-2.0\n---\n# base\n")
    assert _license("nbtools/not-known", [tmp_path]) == ("apache-2.0", "the base model's README.md")
