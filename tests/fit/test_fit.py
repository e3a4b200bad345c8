"""nbtools.fit: the estimator against every case measured on a real GPU, the verdict rules, the CLI and the launch gate.

The calibration table (``benchmarks/results/fit_calibration_*.json``) was written by ``benchmarks/fit_calibrate.py``
on an H200: one NeMo-RL-style GRPO training step per case (FSDP2 bf16/fp32 mixed precision, AdamW, fp32 logits ->
log-softmax -> clipped loss), ``torch.cuda.max_memory_allocated`` per phase, out-of-memory cases recorded as such.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nbtools
from nbtools import fit
from nbtools.errors import ConfigError, LintError, NotFoundError
from nbtools.fit._estimate import ERROR_MARGIN, STRANDED_BLOCK_FRACTION_HIGH

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "nbtools"
GKE = ROOT / "experiments" / "gke-b200-gemma3-1b.yaml"
LOCAL = ROOT / "experiments" / "local.yaml"
TABLES = sorted((ROOT / "benchmarks" / "results").glob("fit_calibration_*.json"))
GPU_OF = {"NVIDIA H200": "h200", "NVIDIA H100 80GB HBM3": "h100", "NVIDIA B200": "b200"}


# The out-of-memory rows that the verdict calls ``tight`` rather than ``does-not-fit``: the estimate plus its error
# fits, and what PyTorch's default allocator strands decides (the stranded band). The out-of-sample two-H100 run's
# Qwen2.5-1.5B 4 x 6144 (the prediction said "fits"; cuBLAS failed with 77.65 GiB reserved for 61.8 allocated; on
# emulated H100s it fitted after two allocator retries, 78.0 GiB reserved, and with expandable segments at 70.4) and
# Gemma-3-1B's 2 x 16384 log-prob pass after a 1 x 16384 step (7.5 GiB reserved but unallocated), and the
# out-of-sample four-GPU run's Qwen2.5-1.5B 4 x 7168 (predicted "tight"; 15.1 GiB reserved but unallocated when a
# 16.2 GiB logits block failed, the same bytes on two re-runs; 64.63 GiB with expandable segments). All with the
# default allocator, which nbtools no longer gives the training job by default.
STRANDED_DECIDES = {("fit_calibration_h100x2_oos.json", "Qwen--Qwen2.5-1.5B", 4, 6144, True),
                    ("fit_calibration_h100x2_boundary.json", "google--gemma-3-1b-it", 1, 16384, True),
                    ("fit_calibration_h100x4_oos.json", "Qwen--Qwen2.5-1.5B", 4, 7168, True)}
EVIDENCE = sorted((ROOT / "benchmarks" / "results").glob("fit_allocator_*.json"))  # allocator re-runs, not tables


def _rows():
    out = []
    for table in TABLES:
        doc = json.loads(table.read_text())
        for row in doc["cases"]:
            out.append((doc["meta"], row))
    return out


def _row_params():
    params = []
    for table in TABLES:
        doc = json.loads(table.read_text())
        for row in doc["cases"]:
            key = (table.name, row["model"], row["micro_batch"], row["seq_len"], row["activation_checkpointing"])
            params.append(pytest.param(doc["meta"], {**row, "_key": key}))
    return params


def _block(report) -> float:
    i = report.inputs
    return 4 * i.micro_batch * i.seq_len * i.arch.vocab_size / 1024**3


def _inputs(meta: dict, row: dict) -> fit.FitInputs:
    chunk = row.get("logprob_chunk")
    if "logprob_pass" not in meta and (row.get("logprob_batch") or row["micro_batch"]) > 1:
        # Tables written before the script followed NeMo-RL's log-prob pass: it log-softmaxed the non-contiguous
        # logits[:, :-1], a third fp32 [B, L-1, V] copy - the same three blocks as the chunked path, so modelled so.
        chunk = row["seq_len"]
    return fit.FitInputs(
        arch=fit.resolve_arch(row["model"].replace("--", "/", 1)), gpu=fit.gpu_spec(GPU_OF[meta["gpu"]]),
        micro_batch=row["micro_batch"], seq_len=row["seq_len"], gpus=row["gpus"],
        logprob_batch=row.get("logprob_batch"), logprob_chunk_size=chunk,
        activation_checkpointing=row["activation_checkpointing"],
        optimizer_foreach=row["optimizer_foreach"], expandable_segments="expandable" in (row.get("alloc_conf") or ""),
        phase="training", colocated=False,
    )


def test_calibration_table_has_enough_real_measurements():
    rows = _rows()
    assert TABLES and all(m["gpu"] in GPU_OF and m["torch"] and m["transformers"] and m["date"] for m, _ in rows)
    measured = [r for _, r in rows if r["status"] == "ok"]
    assert len(measured) >= 15
    assert {r["model"] for r in measured} >= {"meta-llama--Llama-3.2-1B", "Qwen--Qwen2.5-1.5B", "google--gemma-3-1b-it",
                                              "Qwen--Qwen3-4B"}
    assert {r["activation_checkpointing"] for r in measured} == {True, False}
    assert sum(r["status"] == "oom" for _, r in rows) >= 5
    assert all(r["status"] in ("ok", "oom") for _, r in rows), [r for _, r in rows if r["status"] not in ("ok", "oom")]


@pytest.mark.parametrize("meta,row", _row_params(), ids=lambda x: "" if "model" not in x else
                         f"{x['model'].split('--')[1]}-B{x['micro_batch']}-L{x['seq_len']}-ac{int(x['activation_checkpointing'])}"
                         f"{'-es' if x.get('alloc_conf') else ''}-{x['status']}")
def test_estimate_matches_every_measured_case_and_its_verdict(meta, row):
    report = fit.evaluate(_inputs(meta, row), suggest=False)
    if row["status"] == "ok":
        err = report.training.peak_gib / row["peak_gib"] - 1
        assert abs(err) <= 0.15, f"estimate {report.training.peak_gib} vs measured {row['peak_gib']} ({err:+.1%})"
        assert abs(err) <= 0.03, f"accuracy regressed: {err:+.1%} (the calibration met 1.5%)"
        # the stated margin holds: no measured peak above the estimate plus its error margin
        assert row["peak_gib"] <= report.training.peak_gib * (1 + ERROR_MARGIN), (row["peak_gib"], report.training.peak_gib)
        assert report.verdict in ("fits", "tight"), (report.verdict, report.training_need_gib, report.usable_gib)
        phases = row.get("phase_peaks_gib") or {}
        if "logprob" in phases:  # each phase on its own, the log-prob pass (default and chunked) included
            assert report.training.phases["logprob"] == pytest.approx(phases["logprob"], rel=0.03)
            measured_train = max(phases.get(k, 0) for k in ("forward", "backward", "optimizer"))
            est_train = max(report.training.phases[k] for k in ("loss_backward", "layer_backward", "optimizer"))
            assert est_train == pytest.approx(measured_train, rel=0.03)
    else:  # never "fits"; "tight" only where the stranded band decides (the default allocator, error band clear)
        assert report.verdict != "fits", (report.training.peak_gib, report.training_need_gib, report.usable_gib)
        if row["_key"] in STRANDED_DECIDES:
            low, high = report.stranded_gib
            t = report.training.peak_gib * (1 + ERROR_MARGIN)
            assert report.verdict == "tight" and not report.inputs.expandable_segments
            assert report.training.peak_gib + low <= report.usable_gib and t <= report.usable_gib < t + high
        else:
            assert report.verdict == "does-not-fit", (report.training.peak_gib, report.stranded_gib, report.usable_gib)
        # the memory already held when the allocation failed is a lower bound of the true peak
        assert report.training.peak_gib >= (row["oom_allocated_gib"] or 0)


def test_known_miss_is_dominated_by_cases_that_fit():
    """Why the two-GPU miss is ``tight``, not ``does-not-fit``: an allocator term that grows with the estimate or the
    fp32 logits block cannot turn it into does-not-fit without turning measured fitting cases (same GPUs,
    checkpointing on) into it first; only the stranded band's top reaches it."""
    def block(r):
        return 4 * r.inputs.micro_batch * r.inputs.seq_len * r.inputs.arch.vocab_size / 1024**3

    cases = [(meta["gpu"], row, fit.evaluate(_inputs(meta, row), suggest=False)) for meta, row in _rows()]
    (gpu, miss_row, miss), = [c for c in cases if (c[1]["model"], c[1]["micro_batch"], c[1]["seq_len"], c[1]["gpus"])
                              == ("Qwen--Qwen2.5-1.5B", 4, 6144, 2)]
    assert miss_row["status"] == "oom" and miss.verdict == "tight"
    dominating = {(row["model"], row["micro_batch"], row["seq_len"]) for g, row, r in cases
                  if g == gpu and row["status"] == "ok" and row["gpus"] == 2 and row["activation_checkpointing"]
                  and not r.inputs.expandable_segments
                  and r.training.peak_gib > miss.training.peak_gib and block(r) >= block(miss)}
    assert {("meta-llama--Llama-3.2-1B", 4, 8192), ("Qwen--Qwen3-1.7B-Base", 2, 12288)} <= dominating, dominating


def test_known_miss_rerun_points_at_stranded_blocks_not_memory_outside_the_allocator():
    """Why the miss is the stranded band's case, from the re-run with the allocator's counters (issue #32).

    Two H200s came for the two H100s asked for, twice (``fit_allocator_h200x2_*.json``; not calibration rows):
    * the miss's allocated peak is the estimate's (+0.4%) and identical on all three repeats: not an estimate error;
    * memory outside the caching allocator (``mem_get_info`` used - reserved: CUDA context, NCCL, cuBLAS handles) is
      the same for the miss and the cases that dominate it, 1.43 GiB after NCCL's start and 1.57 after the first
      step (the backward thread's cuBLAS handle): it cannot tell them apart;
    * the reserved peak does: unbounded, the allocator reserves 81.2 GiB for the miss's 62.1 (19.2 stranded), more than
      an H100 leaves it, against 71.6 and 69.2 for Llama-3.2-1B 4 x 8192 and Qwen3-1.7B 2 x 12288; Qwen2.5-1.5B strands
      15-23 GiB at micro-batch 4 and 5.3 at 2 x 12288 (same tokens, same logits block);
    * capped at the 77.6 GiB an H100 leaves the allocator, the miss fits after one allocation retry (cached blocks
      freed) every time; the dominating cases need none. On the H100 the cublasCreate of the backward thread, outside
      the allocator and with no retry of its own, met the allocator at the card's edge instead.
    A term for it would model the allocator's block splitting by shape, which no committed row calibrates: the
    verdict reports the stranded memory as a band instead (test_stranded_band_*).
    """
    root = ROOT / "benchmarks" / "results"
    free = json.loads((root / "fit_allocator_h200x2_miss.json").read_text())
    capped = json.loads((root / "fit_allocator_h200x2_cap77_miss.json").read_text())
    assert not {root / "fit_allocator_h200x2_miss.json", root / "fit_allocator_h200x2_cap77_miss.json"} & set(TABLES)
    assert free["meta"]["gpu"] == capped["meta"]["gpu"] == "NVIDIA H200" and capped["meta"]["allocator_cap_gib"] == 77.6
    miss, doms = ("Qwen--Qwen2.5-1.5B", 4, 6144), {("meta-llama--Llama-3.2-1B", 4, 8192), ("Qwen--Qwen3-1.7B-Base", 2, 12288)}

    def rows(doc, key):
        return [r for r in doc["cases"] if (r["model"], r["micro_batch"], r["seq_len"]) == key and not r["alloc_conf"]]

    estimate = fit.estimate("Qwen/Qwen2.5-1.5B", gpu="h100", gpus=2, micro_batch=4, seq_len=6144, phase="training",
                            activation_checkpointing=True)
    assert estimate.verdict == "tight" and estimate.stranded_gib[0] < 77.65 - estimate.training.peak_gib \
        < estimate.stranded_gib[1]  # the H100's 15.8 GiB stranded lie inside the band
    for doc in (free, capped):
        repeats = rows(doc, miss)
        assert len(repeats) == 3 and all(r["status"] == "ok" for r in repeats)
        assert len({r["peak_gib"] for r in repeats}) == 1
        assert repeats[0]["peak_gib"] <= estimate.training.peak_gib * (1 + ERROR_MARGIN)
        outside = {x["non_allocator_gib"]["after_step2"] for key in {miss} | doms for r in rows(doc, key)
                   for x in r["ranks"]}
        assert max(outside) - min(outside) < 0.01 and max(outside) < 1.6, outside
    h100_room = 79.179 - max(x["non_allocator_gib"]["after_step2"] for r in free["cases"] for x in r["ranks"])
    assert all(r["reserved_peak_gib"] > h100_room > r["peak_gib"] for r in rows(free, miss))
    for key in doms:
        assert all(r["reserved_peak_gib"] < h100_room - 5 for r in rows(free, key)), key
        assert all(r["status"] == "ok" and r["num_alloc_retries"] == 0 for r in rows(capped, key)), key
    assert all(r["num_alloc_retries"] >= 1 and r["num_ooms"] == 0 for r in rows(capped, miss))


def test_h100_predictions_written_before_the_run_came_true():
    """The H100 run was out of sample: its verdicts were predicted and committed first."""
    root = ROOT / "benchmarks" / "results"
    pred = json.loads((root / "fit_predictions_h100.json").read_text())["cases"]
    seen = json.loads((root / "fit_calibration_h100.json").read_text())["cases"]
    assert len(pred) == len(seen) >= 20
    for p, s in zip(pred, seen, strict=True):
        assert (p["model"], p["micro_batch"], p["seq_len"]) == (s["model"], s["micro_batch"], s["seq_len"])
        assert (p["predicted_verdict"] == "does-not-fit") == (s["status"] == "oom"), (p, s["status"])
    assert {p["predicted_verdict"] for p in pred} == {"fits", "tight", "does-not-fit"}


def test_two_gpu_tables_measured_on_two_h100s_cover_the_asked_cases():
    rows = []
    for name in ("fit_calibration_h100x2.json", "fit_calibration_h100x2_boundary.json"):
        doc = json.loads((ROOT / "benchmarks" / "results" / name).read_text())
        meta = doc["meta"]
        assert meta["gpu"] == "NVIDIA H100 80GB HBM3" and meta["nproc"] == 2 and meta["torch"] and meta["date"]
        assert meta["train_logprobs"] == "nemo_rl v0.7.0 get_next_token_logprobs_from_logits"
        rows += doc["cases"]
    assert len(rows) >= 16 and all(r["gpus"] == 2 for r in rows)
    assert sum(r["status"] == "oom" for r in rows) * 3 >= len(rows)
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(len(r["rank_peaks_gib"]) == 2 and r["peak_train_gib"] == max(r["rank_peaks_gib"]) for r in ok)
    gemma = [r for r in rows if r["model"] == "google--gemma-3-1b-it" and 8192 <= r["micro_batch"] * r["seq_len"] <= 16384]
    assert {r["activation_checkpointing"] for r in gemma} == {True, False}
    assert {bool(r["logprob_chunk"]) for r in gemma} == {True, False}
    assert any(r["model"] == "meta-llama--Llama-3.1-8B-Instruct" and r["status"] == "ok" for r in rows)
    assert {"Qwen--Qwen3-1.7B-Base", "Qwen--Qwen3-4B", "Qwen--Qwen2.5-1.5B", "meta-llama--Llama-3.2-1B"} <= {
        r["model"] for r in ok}


def test_chunked_log_prob_pass_costs_one_more_fp32_block_on_the_dtensor_path():
    """NeMo-RL v0.7.0 keeps every chunk's log-softmax and concatenates them: measured, and so estimated."""
    doc = json.loads((ROOT / "benchmarks" / "results" / "fit_calibration_h100x2.json").read_text())
    by = {(r["model"], r["micro_batch"], r["seq_len"], r["logprob_batch"], r["logprob_chunk"]): r for r in doc["cases"]}
    g = "google--gemma-3-1b-it"
    plain, chunked = by[(g, 1, 8192, 2, None)], by[(g, 1, 8192, 2, 1024)]
    block = 4 * 2 * 8192 * 262144 / 1024**3  # fp32 [2, 8192, 262144]
    assert chunked["phase_peaks_gib"]["logprob"] - plain["phase_peaks_gib"]["logprob"] == pytest.approx(block, rel=0.01)
    assert chunked["phase_peaks_gib"]["backward"] == plain["phase_peaks_gib"]["backward"]  # training untouched
    assert by[(g, 1, 8192, 4, None)]["status"] == "ok" and by[(g, 1, 8192, 4, 1024)]["status"] == "oom"
    r = fit.estimate("google/gemma-3-1b-it", gpu="h100", gpus=2, micro_batch=1, seq_len=8192, phase="training",
                     activation_checkpointing=True, logprob_batch=4, logprob_chunk_size=1024)
    assert r.verdict == "does-not-fit" and r.training.peak_phase == "logprob"
    assert r.suggestions[0].startswith("set logprob_batch=2:"), r.suggestions
    assert fit.evaluate(r.inputs.with_(logprob_chunk_size=None)).verdict == "tight"  # measured: fits, 70.3 GiB


def test_error_margin_is_the_largest_measured_excess_over_the_estimate():
    excess = []
    for meta, row in _rows():
        if row["status"] == "ok":
            excess.append(row["peak_gib"] / fit.evaluate(_inputs(meta, row), suggest=False).training.peak_gib - 1)
    assert len(excess) >= 60
    assert max(excess) <= ERROR_MARGIN <= max(excess) + 0.001, (max(excess), ERROR_MARGIN)
    r = fit.estimate("Qwen/Qwen3-4B", gpu="h100", gpus=2, micro_batch=2, seq_len=8192, phase="training",
                     activation_checkpointing=True)
    assert any(n.startswith("margin ") and f"{ERROR_MARGIN:.2%}" in n for n in r.notes), r.notes
    tr = r.to_dict()["training"]
    assert tr["error_margin"] == ERROR_MARGIN and tr["margin_gib"] == pytest.approx(tr["need_gib"] - tr["peak_gib"])
    assert tr["margin_gib"] > ERROR_MARGIN * tr["peak_gib"]  # plus the allocator's allowance
    assert tr["stranded_gib"][0] == pytest.approx(tr["margin_gib"] - ERROR_MARGIN * tr["peak_gib"], abs=0.01)


def test_two_gpu_predictions_written_before_the_run_came_true():
    """Out of sample: verdicts committed before the run; one miss, named and explained (STRANDED_DECIDES)."""
    root = ROOT / "benchmarks" / "results"
    pred = json.loads((root / "fit_predictions_h100x2.json").read_text())["cases"]
    seen = json.loads((root / "fit_calibration_h100x2_oos.json").read_text())["cases"]
    assert len(pred) == len(seen) >= 20
    assert {p["predicted_verdict"] for p in pred} == {"fits", "tight", "does-not-fit"}
    misses = []
    for p, s in zip(pred, seen, strict=True):
        assert (p["model"], p["micro_batch"], p["seq_len"]) == (s["model"], s["micro_batch"], s["seq_len"])
        assert s["status"] in ("ok", "oom")
        if (p["predicted_verdict"] == "does-not-fit") != (s["status"] == "oom"):
            misses.append(("fit_calibration_h100x2_oos.json", s["model"], s["micro_batch"], s["seq_len"],
                           s["activation_checkpointing"]))
        if s["status"] == "ok":
            assert s["peak_gib"] == pytest.approx(p["predicted_peak_gib"], rel=0.02)
    assert set(misses) == {k for k in STRANDED_DECIDES if k[0] == "fit_calibration_h100x2_oos.json"}


def test_four_gpu_predictions_written_before_the_run_came_true():
    """Out of sample at four GPUs (emulated H100s, both allocator settings): verdicts committed before the run; every
    predicted does-not-fit ran out of memory, every predicted fits ran, and the one out-of-memory case called
    ``tight`` is the stranded band's (STRANDED_DECIDES); the measured peaks are within 1% of the predicted ones."""
    root = ROOT / "benchmarks" / "results"
    pred = json.loads((root / "fit_predictions_h100x4.json").read_text())
    seen = json.loads((root / "fit_calibration_h100x4_oos.json").read_text())
    assert pred["meta"]["written"] < seen["meta"]["date"] and pred["meta"]["gpus"] == seen["meta"]["nproc"] == 4
    pred, seen = pred["cases"], seen["cases"]
    assert len(pred) == len(seen) >= 20
    assert {p["predicted_verdict"] for p in pred} == {"fits", "tight", "does-not-fit"}
    assert {bool(s["alloc_conf"]) for s in seen} == {True, False}
    misses, errors = [], []
    for p, s in zip(pred, seen, strict=True):
        es = p["extra"].get("alloc_conf") or ""
        key = (p["model"], p["micro_batch"], p["seq_len"], p["activation_checkpointing"], es)
        assert key == (s["model"], s["micro_batch"], s["seq_len"], s["activation_checkpointing"], s["alloc_conf"])
        assert s["status"] in ("ok", "oom") and s["gpus"] == 4
        assert not (p["predicted_verdict"] == "fits" and s["status"] == "oom"), key
        if (p["predicted_verdict"] == "does-not-fit") != (s["status"] == "oom"):
            misses.append(("fit_calibration_h100x4_oos.json", *key[:4]))
        if s["status"] == "ok":
            errors.append(s["peak_gib"] / p["predicted_peak_gib"] - 1)
    assert set(misses) == {k for k in STRANDED_DECIDES if k[0] == "fit_calibration_h100x4_oos.json"}
    assert len(errors) >= 12 and max(map(abs, errors)) <= 0.01 and sum(map(abs, errors)) / len(errors) <= 0.006, errors
    assert max(errors) <= ERROR_MARGIN


def test_four_gpu_tight_oom_is_stranded_memory_not_the_estimate():
    """Why the four-GPU out-of-memory case stays ``tight``: it failed the same way twice more (same allocation, same
    bytes reserved but unallocated), fitted with expandable segments at the estimate, and a measured four-GPU fit
    (checkpointing on, default allocator) had less room past the estimate, in fp32 logits blocks, than it - so no
    stranded low end can call it does-not-fit without calling that fit does-not-fit too."""
    doc = json.loads((ROOT / "benchmarks" / "results" / "fit_allocator_h100emu_x4_tight.json").read_text())
    m = doc["meta"]
    assert m["gpu"] == "NVIDIA H100 80GB HBM3" and m["nproc"] == 4 and m["emulate_gpu"] == "h100"
    default = [r for r in doc["cases"] if not r["alloc_conf"]]
    (es,) = [r for r in doc["cases"] if r["alloc_conf"]]
    assert len(default) == 2 and all(r["status"] == "oom" and r["num_alloc_retries"] >= 1 for r in default)
    assert len({(r["oom_tried_gib"], r["reserved_peak_gib"], r["oom_allocated_gib"]) for r in default}) == 1
    assert es["status"] == "ok" and es["num_alloc_retries"] == 0
    r = fit.estimate("Qwen/Qwen2.5-1.5B", gpu="h100", gpus=4, micro_batch=4, seq_len=7168, phase="training",
                     activation_checkpointing=True, expandable_segments=False)
    assert r.verdict == "tight" and default[0]["oom_tried_gib"] == pytest.approx(_block(r), abs=0.01)
    assert r.training.peak_gib <= es["peak_gib"] <= r.training.peak_gib * (1 + ERROR_MARGIN)
    assert fit.evaluate(r.inputs.with_(expandable_segments=True), suggest=False).verdict == "fits"
    room = (r.usable_gib - r.training.peak_gib) / _block(r)
    fitted = []
    for meta, row in _rows():
        if row["status"] == "ok" and row["gpus"] == 4 and not row["alloc_conf"] and row["activation_checkpointing"]:
            e = fit.evaluate(_inputs(meta, row), suggest=False)
            if (e.usable_gib - e.training.peak_gib) / _block(e) < room:
                fitted.append((row["model"], row["micro_batch"], row["seq_len"]))
    assert ("meta-llama--Llama-3.1-8B-Instruct", 1, 16384) in fitted, fitted


def test_parameter_counts_equal_the_instantiated_models():
    for _, row in _rows():
        assert fit.resolve_arch(row["model"].replace("--", "/", 1)).params == row["params"], row["model"]
    assert fit.resolve_arch("Qwen/Qwen2.5-32B-Instruct").params == 32_763_876_352  # published count, untied + qkv bias
    g27 = fit.resolve_arch("google/gemma-3-27b-it")  # multimodal config: its text_config, plus the vision tower
    assert (g27.num_layers, g27.vocab_size, g27.num_sliding_layers) == (62, 262208, 52) and g27.extra_params > 0


def test_resolve_arch_from_dict_path_directory_and_offline_hub_id(tmp_path, monkeypatch):
    cfg = json.loads((ROOT / "nbtools/data/model_configs/meta-llama--Llama-3.2-1B.json").read_text())
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    a = fit.resolve_arch(cfg)
    assert dataclasses.replace(fit.resolve_arch(tmp_path / "m"), name="") == a and a.num_layers == 16
    assert fit.resolve_arch(str(tmp_path / "m" / "config.json")).kv_bytes_per_token() == 16 * 8 * 64 * 2 * 2
    with pytest.raises(NotFoundError, match="fix: pass the model directory"):
        fit.resolve_arch(tmp_path / "nothing-here")
    with pytest.raises(ConfigError, match="lacks vocab_size"):
        fit.resolve_arch({"hidden_size": 8})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # AutoConfig must not reach the network from a test
    with pytest.raises(NotFoundError, match="not among the configs shipped") as e:
        fit.resolve_arch("example-org/not-a-shipped-model")
    assert "fix: pass a local path" in str(e.value)


def test_gpu_table_names_and_errors():
    assert fit.gpu_spec("nvidia-h200-141gb") is fit.GPUS["h200"] and fit.gpu_spec("nvidia-b200") is fit.GPUS["b200"]
    assert fit.gpu_spec("H100").gib == 79.65 and fit.gpu_spec("96gib").gib == 96
    with pytest.raises(ConfigError, match="known: b200, h200, h100"):
        fit.gpu_spec("tpu-v5")


def test_generation_refuses_what_vllm_refuses_and_suggests_a_fix():
    arch = fit.resolve_arch("Qwen/Qwen2.5-32B-Instruct")
    g = fit.generation_estimate(arch, capacity_gib=79.65, gpu_memory_utilization=0.6, max_model_len=4096)
    assert g.verdict == "does-not-fit" and "does not even hold its weights" in g.problems[0]
    tp8 = fit.generation_estimate(arch, capacity_gib=79.65, gpu_memory_utilization=0.6, max_model_len=4096,
                                  tensor_parallel=8)
    assert tp8.verdict == "fits" and tp8.terms["weights"] == pytest.approx(2 * arch.params / 8 / 2**30, rel=1e-3)
    assert tp8.kv_bytes_per_token == 64 * 1 * 128 * 2 * 2  # 8 KV heads over 8 ranks: one per rank
    r = fit.estimate(arch, gpu="h100", phase="generation", seq_len=4096)
    assert r.training is None and r.verdict == "does-not-fit"
    assert any("--vllm-tensor-parallel" in s and "-> fits" in s for s in r.suggestions), r.suggestions
    # Gemma-3's sliding-window layers keep at most their window of KV cache
    gemma = fit.resolve_arch("google/gemma-3-1b-it")
    long = fit.generation_estimate(gemma, capacity_gib=140.4, max_model_len=8192)
    assert long.kv_gib_per_sequence * 2**30 == pytest.approx(256 * 2 * 2 * (4 * 8192 + 22 * 512), rel=1e-3)


def test_single_case_suggestions_are_the_smallest_change_that_fits():
    r = fit.estimate("Qwen/Qwen2.5-1.5B", gpu="h100", micro_batch=8, seq_len=4096, phase="training")
    assert r.verdict == "does-not-fit" and r.certain and r.generation is None
    assert r.suggestions[0].startswith("use --micro-batch 2:") and r.suggestions[0].endswith("-> fits")
    assert fit.evaluate(r.inputs.with_(micro_batch=2)).verdict in ("fits", "tight")
    ok = fit.estimate("Qwen/Qwen2.5-1.5B", gpu="h200", micro_batch=1, seq_len=1024, phase="training")
    assert ok.verdict == "fits" and ok.suggestions == [] and ok.training.peak_phase == "optimizer"
    with pytest.raises(ConfigError, match="micro_batch must be a positive integer"):
        fit.estimate("Qwen/Qwen2.5-1.5B", micro_batch=0)


def test_check_reads_the_recipe_and_the_launch_overrides():
    cfg = nbtools.config.load(GKE)
    inputs, _ = fit.inputs_from_experiment(cfg)
    assert (inputs.gpu.key, inputs.gpus, inputs.micro_batch, inputs.seq_len, inputs.max_model_len) == ("b200", 8, 4, 2048, 2048)
    assert inputs.colocated and not inputs.activation_checkpointing and inputs.gpu_memory_utilization == 0.6
    big = cfg.replace(**{"trainer.overrides": ["policy.train_micro_batch_size=64",
                                               "policy.dtensor_cfg.activation_checkpointing=true"]})
    inputs, _ = fit.inputs_from_experiment(big)
    # v0.7's recipe sets logprob_batch_size: ${policy.train_micro_batch_size}; the interpolation is followed
    assert inputs.micro_batch == 64 and inputs.logprob_batch == 64 and inputs.activation_checkpointing
    local = fit.check(nbtools.config.load(LOCAL))
    assert local.verdict == "not-applicable" and "not applicable (CPU rehearsal)" in local.notes[0]


def _nb(*args, code: int) -> subprocess.CompletedProcess:
    r = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == code, f"exit {r.returncode}\nstdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-2000:]}"
    return r


def test_cli_fit_experiment_json():
    d = json.loads(_nb("fit", GKE, "--json", code=0).stdout)
    assert d["verdict"] in ("fits", "tight") and d["gpu_gib"] == fit.GPUS["b200"].gib
    terms = d["training"]["terms"]
    assert {"master_weights_fp32", "gradients_fp32", "adamw_states_fp32", "activations", "logits_fp32"} <= set(terms)
    assert d["training"]["peak_gib"] == pytest.approx(sum(terms.values()), abs=0.01)
    assert d["generation"]["max_concurrent_sequences"] > 1 and isinstance(d["suggestions"], list)
    text = _nb("fit", LOCAL, code=0).stdout
    assert "not applicable (CPU rehearsal)" in text


def test_cli_fit_single_case_exit_status_and_shape():
    r = _nb("fit", "--model", "Qwen/Qwen2.5-1.5B", "--gpu", "h100", "--gpus", "1", "--micro-batch", "8", "--seq-len",
            "4096", "--json", code=1)
    d = json.loads(r.stdout)
    assert d["verdict"] == "does-not-fit" and d["suggestions"] and "fix: use --micro-batch 2" in r.stderr
    assert set(d) >= {"gpu_gib", "training", "generation", "verdict", "suggestions"}
    d = json.loads(_nb("fit", "--model", ROOT / "nbtools/data/model_configs/google--gemma-3-1b-it.json", "--gpu", "h200",
                       "--micro-batch", "2", "--seq-len", "2048", "--activation-checkpointing", "--phase", "training",
                       "--json", code=0).stdout)
    assert d["generation"] is None and d["inputs"]["activation_checkpointing"] is True
    assert "either EXPERIMENT.yaml or --model" in _nb("fit", GKE, "--model", "x", code=1).stderr


def test_launch_lint_only_shows_the_fit_finding(capfd):
    from nbtools.cli import main

    assert main(["launch", str(GKE), "--lint-only", "--json"]) == 0
    d = json.loads(capfd.readouterr().out)
    assert "gpu-memory-fit" in d["checked"] and not any(f["rule"] == "gpu-memory-fit" for f in d["findings"])
    big = "trainer.overrides=[policy.train_micro_batch_size=64]"
    assert main(["launch", str(GKE), big, "--lint-only", "--json"]) == 1
    out = capfd.readouterr()
    (finding,) = [f for f in json.loads(out.out)["findings"] if f["rule"] == "gpu-memory-fit"]
    assert finding["severity"] == "blocking" and finding["message"].startswith("certainly does not fit")
    assert finding["key"] == "policy.train_micro_batch_size" and "--ignore-fit" in finding["fix"]
    assert main(["launch", str(GKE), big, "--lint-only", "--ignore-fit", "--json"]) == 0
    (finding,) = [f for f in json.loads(capfd.readouterr().out)["findings"] if f["rule"] == "gpu-memory-fit"]
    assert finding["severity"] == "warning"


def test_submit_refuses_a_certain_oom_unless_told_to_go_ahead(monkeypatch):
    import nbtools.jobs
    import nbtools.launch as launch

    monkeypatch.setattr(nbtools.jobs, "attach", lambda *a, **k: (_ for _ in ()).throw(NotFoundError("no job")))
    sent = []
    monkeypatch.setattr(launch._submit, "send_for", lambda spec, secrets: sent.append(spec.submission_id) or "submitted")
    cfg = nbtools.config.load(GKE).replace(**{"trainer.overrides": ["policy.train_micro_batch_size=64"]})
    with pytest.raises(LintError, match="certainly does not fit") as err:
        launch.submit(cfg)
    assert "gpu-memory-fit" not in str(err.value) or "ignore_fit=True" in str(err.value)
    assert sent == []
    assert launch.submit(cfg, ignore_fit=True) == "submitted" and sent == [cfg.submission_id]


def test_non_colocated_gpu_suggestion_counts_the_vllm_nodes_and_never_repeats_a_set_value():
    """Issue #27: tutorial 001's Gemma-3-27B run (2 nodes, one of them vLLM's) was told to set worker_replicas=2."""
    from nbtools.launch import recipes

    base = recipes.get("tutorial-001-gemma3-27b-it")  # the recipe now has 3 nodes (2 training + 1 vLLM)
    cfg = recipes.get("tutorial-001-gemma3-27b-it", cluster={**dataclasses.asdict(base.cluster), "worker_replicas": 2})
    assert cfg.cluster.worker_replicas == 2
    r = fit.check(cfg)
    assert r.inputs.gpus == 8 and not r.inputs.colocated and r.inputs.generation_nodes == 1
    gpu_fixes = [s for s in r.suggestions if s.startswith("set cluster.worker_replicas=")]
    assert gpu_fixes and gpu_fixes[0].startswith("set cluster.worker_replicas=3 (16 training GPUs + 1 for vLLM)")
    for s in r.suggestions:
        assert not s.startswith(f"set cluster.worker_replicas={cfg.cluster.worker_replicas} "), s
    # the suggested size really trains on 16 GPUs when the experiment says so
    more = recipes.get("tutorial-001-gemma3-27b-it", cluster={**dataclasses.asdict(cfg.cluster), "worker_replicas": 3})
    assert fit.check(more).inputs.gpus == 16


def test_multi_node_training_shards_over_every_training_gpu():
    """Tutorial 004's Llama-3.1-8B: four 8-GPU nodes train on 32 GPUs when colocated, fewer when vLLM has its own."""
    from nbtools.launch import recipes

    names = [n for n in recipes.names() if "004" in n and "8b" in n.lower()]
    assert names, recipes.names()
    cfg = recipes.get(names[0])
    r = fit.check(cfg)
    assert r.inputs.gpus == cfg.cluster.worker_replicas * cfg.cluster.gpus_per_node == 32
    solo = fit.evaluate(r.inputs.with_(gpus=8), suggest=False)
    assert r.training.terms["adamw_states_fp32"] == pytest.approx(solo.training.terms["adamw_states_fp32"] / 4, rel=0.01)
    apart = fit.evaluate(r.inputs.with_(colocated=False, generation_nodes=1, gpus=24), suggest=False)
    assert apart.usable_gib > r.usable_gib  # no sleeping vLLM beside the trainer


def test_verl_fit_follows_its_tokens_and_its_own_logits_and_checkpointing():
    """Issue #28 item 4: verl v0.7.0 removes padding, checkpoints whole layers and takes bf16 logits through
    flash-attn's cross-entropy; with use_dynamic_bsz a micro-batch is ppo_max_token_len_per_gpu tokens."""
    from nbtools import config

    verl_exp = ROOT / "experiments" / "gke-b200-verl.yaml"
    r = fit.check(config.load(verl_exp))
    assert r.inputs.profile.trainer == "verl" and r.inputs.gpus == 16 and r.inputs.sequence_packing
    assert r.verdict in ("fits", "tight"), r.summary()  # tutorial 002 ran these settings on 16 B200s
    nemo = fit.evaluate(r.inputs.with_(profile=nbtools.trainers.FitProfile(), reference_on_gpu=True), suggest=False)
    assert nemo.training.phase_terms["loss_backward"]["logits_fp32"] == pytest.approx(
        3 * r.training.phase_terms["loss_backward"]["logits_fp32"], rel=0.01)  # 3 x fp32 vs 2 x bf16
    assert r.training.phase_terms["loss_backward"]["activations"] < nemo.training.phase_terms["loss_backward"]["activations"] / 3
    cfg = config.load(verl_exp)
    dyn = ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8192"]
    d = fit.check(config.load(verl_exp, overrides={"trainer.overrides": [*cfg.trainer.overrides, *dyn]}))
    assert (d.inputs.micro_batch, d.inputs.seq_len, d.training.tokens_per_gpu) == (1, 8192, 8192)
    assert any("use_dynamic_bsz" in n for n in d.notes)
    big = fit.evaluate(d.inputs.with_(seq_len=1 << 19))
    assert big.verdict == "does-not-fit"
    assert any(s.startswith("set actor_rollout_ref.actor.ppo_max_token_len_per_gpu=") for s in big.suggestions), big.suggestions


def _script_constant(name: str):
    """A literal constant of benchmarks/fit_calibrate.py, read without importing it (it sets CUDA variables)."""
    import ast

    tree = ast.parse((ROOT / "benchmarks" / "fit_calibrate.py").read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == name]
    return ast.literal_eval(node.value)


def test_four_gpu_tables_ran_as_h100s_said_per_row():
    """Issue 46: four H200s came for four H100s; each rank took the difference to 81,559 MiB with a raw cudaMalloc
    before the step, and every row says so. The calibrated architectures and an 8B model, both sides of the card,
    both allocator settings."""
    docs = [json.loads(t.read_text()) for t in TABLES if t.name.startswith("fit_calibration_h100x4")]
    assert len(docs) >= 2
    h100 = fit.gpu_spec("h100").mib * 1024**2
    assert _script_constant("EMULATE_MIB")["h100"] == fit.gpu_spec("h100").mib
    rows = []
    for doc in docs:
        m = doc["meta"]
        assert m["nproc"] == 4 and m["torch"] and m["transformers"] and m["date"] and m["emulate_gpu"] == "h100"
        assert m["gpu"] == "NVIDIA H100 80GB HBM3" and m["gpu_total_bytes"] == h100
        assert m["card"] == "NVIDIA H200" and m["emulation"]["pad_bytes"] == m["card_total_bytes"] - h100 > 0
        assert m["emulation"]["pad_method"].startswith(("cupy", "ctypes"))
        for r in doc["cases"]:
            assert r["gpus"] == 4 and r["emulate_gpu"] == "h100" and r["card"] == "NVIDIA H200"
            assert all(x["emulation"]["free_after_bytes"] < h100 for x in r["ranks"])  # the rank saw an H100's room
            assert all(x["non_allocator_gib"][("at_oom" if r["status"] == "oom" else "after_step2")] < 2 for x in r["ranks"])
        rows += doc["cases"]
    ok = [r for r in rows if r["status"] == "ok"]
    assert {r["model"] for r in ok} >= {"meta-llama--Llama-3.2-1B", "Qwen--Qwen2.5-1.5B", "google--gemma-3-1b-it",
                                        "Qwen--Qwen3-4B", "Qwen--Qwen3-1.7B-Base", "meta-llama--Llama-3.1-8B-Instruct"}
    for es in (False, True):
        assert {r["status"] for r in rows if bool(r["alloc_conf"]) == es} == {"ok", "oom"}
    assert sum(r["status"] == "oom" for r in rows) * 4 >= len(rows) and len(rows) >= 40
    assert max(r["reserved_peak_gib"] for r in rows) < h100 / 1024**3  # nothing reserved past the emulated card


def test_stranded_band_is_calibrated_from_committed_reserved_allocated_ratios():
    """The band's top is the largest reserved - allocated peak, in fp32 logits blocks, over the committed rows in
    which that block is at least a tenth of the peak and no allocator retry capped the reserve (tables and the
    allocator re-runs); with expandable segments the band is the page rounding alone."""
    ratios = []
    for path in TABLES + EVIDENCE:
        doc = json.loads(path.read_text())
        for row in doc["cases"]:
            if row["status"] != "ok" or row.get("alloc_conf") or row.get("num_alloc_retries") or row.get("allocator_cap_gib"):
                continue
            r = fit.evaluate(_inputs(doc["meta"], row), suggest=False)
            reserved = row.get("reserved_peak_gib") or row["max_reserved_gib"]
            if r.training.peak_phase == "loss_backward" and _block(r) >= 0.1 * row["peak_gib"]:
                ratios.append((reserved - row["peak_gib"]) / _block(r))
    assert len(ratios) >= 40
    assert max(ratios) <= STRANDED_BLOCK_FRACTION_HIGH <= max(ratios) + 0.1, max(ratios)
    r = fit.estimate("Qwen/Qwen2.5-1.5B", gpu="h100", gpus=4, micro_batch=4, seq_len=6144, phase="training",
                     activation_checkpointing=True)
    assert r.stranded_gib == pytest.approx((0.45 * _block(r), STRANDED_BLOCK_FRACTION_HIGH * _block(r)), abs=0.01)
    assert any(n.startswith("stranded memory ") for n in r.notes)
    es = fit.evaluate(r.inputs.with_(expandable_segments=True), suggest=False)
    assert es.stranded_gib == (0.5, 0.5) and not any(n.startswith("stranded memory ") for n in es.notes)


def test_two_gpu_miss_on_emulated_h100s_for_both_allocator_settings():
    """Issue 46: the two-GPU miss re-run as two H100s (raw cudaMalloc of the difference on two H200s, before the
    step): with PyTorch's default allocator it fits only after allocator retries with the card's memory reserved -
    the verdict is ``tight``; with expandable segments it needs no retry and 8 GiB less - ``fits``."""
    doc = json.loads((ROOT / "benchmarks" / "results" / "fit_allocator_h100emu_x2_miss.json").read_text())
    m = doc["meta"]
    assert m["gpu"] == "NVIDIA H100 80GB HBM3" and m["card"] == "NVIDIA H200" and m["nproc"] == 2
    assert m["emulation"]["pad_bytes"] > 60 * 1024**3
    miss = [r for r in doc["cases"] if (r["model"], r["micro_batch"], r["seq_len"]) == ("Qwen--Qwen2.5-1.5B", 4, 6144)]
    default, es = [r for r in miss if not r["alloc_conf"]], [r for r in miss if r["alloc_conf"]]
    assert len(default) == 2 and len(es) == 1 and all(r["status"] == "ok" and r["emulate_gpu"] == "h100" for r in miss)
    assert all(r["num_alloc_retries"] >= 1 and r["reserved_peak_gib"] > 77.5 for r in default)
    assert es[0]["num_alloc_retries"] == 0 and es[0]["reserved_peak_gib"] < 71.5
    for rows, setting, verdict in ((default, False, "tight"), (es, True, "fits")):
        r = fit.estimate("Qwen/Qwen2.5-1.5B", gpu="h100", gpus=2, micro_batch=4, seq_len=6144, phase="training",
                         activation_checkpointing=True, expandable_segments=setting)
        assert r.verdict == verdict, (setting, r.verdict, r.stranded_gib)
        assert all(x["peak_gib"] <= r.training.peak_gib * (1 + ERROR_MARGIN) for x in rows)
    doms = [r for r in doc["cases"] if r["model"] != "Qwen--Qwen2.5-1.5B"]
    assert doms and all(r["status"] == "ok" and r["num_alloc_retries"] == 0 for r in doms)


def test_training_workers_get_expandable_segments_by_default_and_the_experiment_can_turn_it_off():
    """Issue 42: nbtools gives NeMo-RL's DTensor policy workers PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (no
    stranded blocks), never the whole job (colocated vLLM's CuMemAllocator asserts on it); the fit check sees it.
    Any trainer.env_vars.PYTORCH_CUDA_ALLOC_CONF turns the default off, and the verdict then carries the band."""
    from nbtools.launch import runtime_env
    from nbtools.trainers import nemo_rl

    cfg = nbtools.config.load(GKE)
    rendered = [o.render() for o in nemo_rl.overrides(cfg)]
    assert "+policy.dtensor_cfg.env_vars.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in rendered
    assert "PYTORCH_CUDA_ALLOC_CONF" not in runtime_env.env_vars(cfg)  # not job-wide: vLLM shares the job's env
    assert "expandable_segments:True" in nemo_rl.command(cfg)
    on = fit.check(cfg, gpu="h100")
    assert on.inputs.expandable_segments and on.stranded_gib == (0.5, 0.5)

    off = cfg.replace(**{"trainer.env_vars": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}})
    assert not any("PYTORCH_CUDA_ALLOC_CONF" in o.key for o in nemo_rl.overrides(off))
    assert runtime_env.env_vars(off)["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False"
    r = fit.check(off, gpu="h100")
    assert not r.inputs.expandable_segments and r.stranded_gib[1] > r.stranded_gib[0] > 0.5
    # the user's own override of the key wins, and is not repeated
    mine = cfg.replace(**{"trainer.overrides": ["++policy.dtensor_cfg.env_vars.PYTORCH_CUDA_ALLOC_CONF=backend:native"]})
    assert [o.render() for o in nemo_rl.overrides(mine) if "ALLOC" in o.key] == [
        "++policy.dtensor_cfg.env_vars.PYTORCH_CUDA_ALLOC_CONF=backend:native"]
    assert not fit.check(mine, gpu="h100").inputs.expandable_segments


def test_a_cluster_we_did_not_make_may_have_any_nvidia_gpu(tmp_path, monkeypatch):
    """Issue 42 item 4: tutorial 003's A100 80GB nodes (DGX Cloud Lepton, backend ray) are judged as A100s, not refused
    or judged as H200s; any GPU of the table (or its memory) is accepted there; GKE keeps the machines it provisions."""
    import nbtools
    from nbtools.errors import ConfigError

    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    exp = Path(__file__).resolve().parents[2] / "experiments"
    for gpu, gib in (("a100-80", 80.0), ("nvidia-a100-80gb", 80.0), ("a100-40", 40.0), ("h100", 79.65), ("l4", 22.49),
                     ("nvidia-tesla-t4", 15.0), ("96gib", 96.0)):
        cfg = nbtools.config.load(exp / "tutorial-003-qwen3-1.7b-deepscaler.yaml", overrides={"cluster.gpu_type": gpu})
        assert cfg.cluster.machine_type is None  # no GKE machine type for a cluster nbtools did not make
        assert fit.check(cfg).inputs.gpu.gib == gib, gpu
    with pytest.raises(ConfigError, match=r"cluster.gpu_type: 'tpu-v5' is not a GPU whose memory nbtools knows.*'<N>gib'"):
        nbtools.config.load(exp / "tutorial-003-qwen3-1.7b-deepscaler.yaml", overrides={"cluster.gpu_type": "tpu-v5"})
    with pytest.raises(ConfigError, match=r"'a100-80' is not a GPU the gke backend provisions; allowed: nvidia-b200, "
                                          r"nvidia-h200-141gb.*`backend: ray`"):
        nbtools.config.load(exp / "gke-b200-gemma3-1b.yaml", overrides={"cluster.gpu_type": "a100-80"})
    assert nbtools.config.load(exp / "gke-b200-gemma3-1b.yaml").cluster.machine_type == "a4-highgpu-8g"
