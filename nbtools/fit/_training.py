"""Per-GPU memory of the training phase of a GRPO step: NeMo-RL's DTensor (FSDP2) policy, verl's FSDP actor.

Why: the step's peak is a sum of a few allocations whose sizes follow from the architecture and the config; each is
modelled here from what the code allocates (not fitted per case), and calibrated against one real step per case
(``benchmarks/fit_calibrate.py``, table in ``benchmarks/results/``).

Notation (bytes): ``P`` parameters, ``P_loc = P / W`` per GPU (FSDP2 shards over data x context parallel ranks, TP
splits each weight, so ``W = dp * cp * tp`` GPUs hold one copy), ``T = B * L / cp`` tokens of one micro-batch per
GPU, ``V`` vocabulary, ``H`` hidden size, ``I`` MLP width, ``nq``/``nkv`` query/KV heads of ``hd`` dims.

Terms (each a row of the fit table):

* ``master_weights_fp32 = 4 P_loc`` - fp32 sharded parameters (NeMo-RL loads fp32 master weights);
* ``gradients_fp32 = 4 P_loc`` - FSDP2 reduces in fp32 (``reduce_dtype``) into sharded fp32 gradients;
* ``adamw_states_fp32 = 8 P_loc`` - AdamW's ``exp_avg`` and ``exp_avg_sq``;
* ``gathered_bf16_params = 2 P_root / tp + 2 * 2 P_layer / tp`` - the root group (embedding, untied LM head, final
  norm) stays unsharded from the first forward to the end of backward; one layer is gathered and the next prefetched;
* ``activations = T * sum_layers a_layer + T * a_final`` with ``a_layer`` the bytes autograd saves per token
  (:func:`layer_activation_bytes`); plus the sliding-window attention masks of Gemma-style layers (``B L^2`` bytes
  per mask) when the sequence is longer than the window;
* ``logits = k * 4 B L V / (tp cp)`` - fp32 logits (FSDP2 ``output_dtype``) and ``log_softmax``: ``k = 3`` at the
  start of backward (the saved log-softmax output, the gradient scattered by ``gather``, and ``log_softmax``'s
  gradient). The training loss takes NeMo-RL v0.7.0's ``get_next_token_logprobs_from_logits`` without a chunk size
  (``prepare_loss_input`` passes none on the DTensor path), so ``policy.logprob_chunk_size`` leaves this term alone.
  The no-grad log-prob pass (``LogprobsPostProcessor._compute_local_logprobs``) log-softmaxes the whole contiguous
  logits and gathers from a slice: ``k = 2``; with ``logprob_chunk_size`` it keeps every chunk's fp32 log-softmax
  in a list and concatenates them, so the logits, the chunks and the result coexist: ``k = 3`` (measured on two
  H100s: 38.3 GiB without, 54.3 GiB with a chunk size, Gemma-3-1B, 2 x 8192 tokens);
* ``backward_buffers`` - while a layer runs backward: its unsharded bf16 gradients and the fp32 reduce-scatter input
  (``6 P_layer / tp``), the bf16 gradient of the root's (tied) embedding ``2 V H / tp``, activation gradients
  (``T (6 I + 8 H)``) and, with activation checkpointing, the recomputed module (``8 I T``);
* ``optimizer_step_temp`` - ``torch.optim.AdamW``'s foreach path materialises ``sqrt(exp_avg_sq)`` (``4 P_loc``); the
  per-parameter path (NeMo-RL v0.5's ``foreach: false``) two temporaries of the largest parameter;
* verl (v0.7.0 ``verl/workers/actor/dp_actor.py``, ``verl/utils/torch_functional.py``): HF gradient checkpointing
  keeps each layer's bf16 input (``2 H`` per token) and recomputes one whole layer in backward; the loss takes bf16
  logits through flash-attn's cross-entropy (``2 x 2 B L V``: the logits and their gradient), the log-prob pass
  adds the entropy's softmax and product (``3 x 2 B L V``); with ``use_remove_padding`` (v0.7.0's default) the
  micro-batch is one packed row, and with ``use_dynamic_bsz`` it holds ``ppo_max_token_len_per_gpu`` tokens;
* ``reference_model`` - verl keeps the reference policy on the GPU in bf16 (``2 P_loc``) unless it offloads it;
  NeMo-RL's DTensor policy keeps the reference weights in pinned CPU memory (0 here).

The peak is the largest of the phases ``loss_backward``, ``layer_backward``, ``optimizer`` and ``logprob``; ``terms``
are the rows of the peak phase and add up to it.

Example:
    >>> est = training_estimate(resolve_arch("Qwen/Qwen2.5-1.5B"), micro_batch=4, seq_len=2048)
    >>> round(est.peak_gib, 1), est.peak_phase
    (59.5, 'loss_backward')
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nbtools.fit._arch import ModelArch
from nbtools.trainers import FitProfile

__all__ = ["TrainingEstimate", "training_estimate", "layer_activation_bytes"]

GIB = 1024**3


def layer_activation_bytes(arch: ModelArch, *, checkpointing: bool, sliding: bool, materialized_mask: bool) -> tuple[int, int]:
    """Bytes autograd keeps per token for one decoder layer under bf16 autocast: ``(hidden_part, inner_part)``.

    ``hidden_part`` scales with ``H`` (replicated over TP ranks unless sequence parallel), ``inner_part`` with heads
    and MLP width (split over TP ranks).

    Without checkpointing (HF Llama/Qwen/Gemma layers, PyTorch saves only what a backward needs):

    * RMSNorm, Llama style: the fp32 copy of its input and the bf16 normalised tensor, ``6 H``; Gemma style (computes
      in fp32): the fp32 input and the fp32 normalised tensor, ``8 H``; two norms per layer (four in Gemma-2/3);
    * inputs of the q/k/v and gate/up projections (the norms' bf16 outputs): ``2 * 2 H``;
    * per-head q/k norms (Qwen3, Gemma-3): ``6`` (or ``8``) ``(nq + nkv) hd``;
    * scaled-dot-product attention: q, k, v and the output in bf16 plus the fp32 log-sum-exp,
      ``2 (2 nq + 2 nkv) hd + 4 nq``; a layer with a materialised (sliding-window) mask runs without native GQA, so k
      and v are repeated to ``nq`` heads: ``8 nq hd + 4 nq``;
    * gated MLP: gate output, activation output, up output and their product, ``4 * 2 I``.

    With NeMo-RL's activation checkpointing (``mlp``, ``self_attn``, ``input_layernorm``, ``post_attention_layernorm``
    wrapped) only the four wrapped modules' bf16 inputs stay, ``4 * 2 H``; Gemma-3's unwrapped pre/post feed-forward
    norms keep their ``8 H`` each: ``24 H``.
    """
    h, hd, nq, nkv, i = arch.hidden_size, arch.head_dim, arch.num_heads, arch.num_kv_heads, arch.intermediate_size
    if checkpointing:
        return (24 * h if arch.gemma_norms else 8 * h), 0
    norm = 8 * h if arch.gemma_norms else 6 * h
    n_norms = 4 if arch.gemma_norms else 2
    hidden = n_norms * norm + 2 * 2 * h
    qk = ((8 if arch.gemma_norms else 6) * (nq + nkv) * hd) if arch.qk_norm else 0
    attn = (8 * nq * hd if (sliding and materialized_mask) else 2 * (2 * nq + 2 * nkv) * hd) + 4 * nq
    return hidden, qk + attn + 8 * i


@dataclass
class TrainingEstimate:
    """The training phase's estimate: ``terms`` (GiB, the rows of the peak phase) and every phase's peak."""

    peak_gib: float
    peak_phase: str
    terms: dict[str, float]
    phases: dict[str, float]
    tokens_per_gpu: int
    notes: list[str] = field(default_factory=list)
    phase_terms: dict[str, dict[str, float]] = field(default_factory=dict)  # every phase's terms (GiB)


def training_estimate(
    arch: ModelArch,
    *,
    micro_batch: int,
    seq_len: int,
    gpus: int = 1,
    tensor_parallel: int = 1,
    context_parallel: int = 1,
    sequence_parallel: bool = False,
    activation_checkpointing: bool = False,
    logprob_batch: int | None = None,
    logprob_chunk_size: int | None = None,
    sequence_packing: bool = False,
    optimizer_foreach: bool | None = None,
    cpu_offload: bool = False,
    profile: FitProfile | None = None,
    reference_on_gpu: bool | None = None,
) -> TrainingEstimate:
    """Estimate the per-GPU peak of one training step (see the module docstring for every term's formula).

    Args:
        arch: the model (``resolve_arch``).
        micro_batch, seq_len: sequences per micro-batch per GPU and their (maximum) length in tokens.
        gpus: GPUs training runs on (FSDP2 world: data x context x tensor parallel).
        tensor_parallel, context_parallel, sequence_parallel: NeMo-RL ``dtensor_cfg`` parallelism.
        activation_checkpointing: ``dtensor_cfg.activation_checkpointing``.
        logprob_batch: ``logprob_batch_size`` (default: ``micro_batch``).
        logprob_chunk_size: ``policy.logprob_chunk_size`` (None: unset); only the log-prob pass changes.
        sequence_packing: NeMo-RL's ``sequence_packing.enabled``: the micro-batch is one packed row of ``B x L`` tokens
            run with FlashAttention-2 (no attention mask; a contiguous log-softmax input).
        optimizer_foreach: AdamW's ``foreach`` (None: PyTorch's default, foreach on CUDA).
        cpu_offload: ``dtensor_cfg.cpu_offload`` (sharded parameters, gradients and optimizer on the CPU).
        profile: the trainer's actor (``nbtools.trainers.FitProfile``: logits dtype, checkpointing granularity,
            where the reference policy lives); default the calibrated FSDP2 policy with fp32 logits.
        reference_on_gpu: override where the reference policy lives.

    Example:
        >>> training_estimate(arch, micro_batch=2, seq_len=4096, gpus=8).peak_gib
    """
    profile = profile or FitProfile()
    tp, cp = max(1, tensor_parallel), max(1, context_parallel)
    w = max(1, gpus)
    b, L, v, h = micro_batch, seq_len, arch.vocab_size, arch.hidden_size
    b_lp = logprob_batch or micro_batch
    t = b * L // cp
    p_loc = arch.params / w
    sp_div = tp if sequence_parallel else 1

    static = 0.0 if cpu_offload else 4 * p_loc
    grads = 0.0 if cpu_offload else 4 * p_loc
    adam = 0.0 if cpu_offload else 8 * p_loc
    gathered = 2 * arch.params_root / tp + 2 * 2 * arch.params_layer / tp

    window = arch.sliding_window
    mask_on = bool(window and arch.num_sliding_layers and L > window and not sequence_packing)
    n_slide = arch.num_sliding_layers if mask_on else 0
    acts = 0.0
    layer_full = 0.0  # one layer's un-checkpointed activations (what verl's whole-layer checkpointing recomputes)
    for sliding in (True, False):
        n = n_slide if sliding else arch.num_layers - n_slide
        hid, inner = layer_activation_bytes(arch, checkpointing=activation_checkpointing, sliding=sliding,
                                            materialized_mask=mask_on)
        if profile.whole_layer_checkpointing and activation_checkpointing:  # each decoder layer keeps its bf16 input
            full_h, full_i = layer_activation_bytes(arch, checkpointing=False, sliding=sliding, materialized_mask=mask_on)
            layer_full = max(layer_full, t * (full_h / sp_div + full_i / tp)) if n else layer_full
            hid, inner = 2 * h, 0
        acts += n * t * (hid / sp_div + inner / tp)
    norm = 8 * h if arch.gemma_norms else 6 * h
    acts += t * (norm + 2 * h) / sp_div  # final norm + the LM head's input
    rope_sets = 2 if arch.gemma_norms and arch.num_sliding_layers else 1
    acts += t * rope_sets * 2 * 2 * arch.head_dim  # bf16 cos and sin, shared by the layers
    masks = 0.0
    if mask_on:  # bool [B, 1, L, L] mask + each sliding layer's additive bf16 bias saved by SDPA (not with AC)
        masks = b * L * L * (1 + (0 if activation_checkpointing else 2 * n_slide))
    acts += masks

    logit_elems = b * L * v / (tp * cp)
    logits_bwd = 3 * 4 * logit_elems
    lp_k = (3 if logprob_chunk_size else 2) * 4
    if profile.bf16_logits:  # flash-attn's cross-entropy (fp32 per row only; gradient written in place); the
        # log-prob pass also computes the entropy (softmax and its product with the logits, bf16 [T, V] each)
        logits_bwd, lp_k = 2 * 2 * logit_elems, 3 * 2
    ref = 0.0
    if reference_on_gpu if reference_on_gpu is not None else profile.reference_on_gpu:
        ref = 2 * p_loc

    root_grad = 2 * (arch.params_embedding + arch.params_lm_head) / tp
    layer_grads = 6 * arch.params_layer / tp
    act_grads = t * (6 * arch.intermediate_size / tp + 8 * h / sp_div)
    recompute = t * 8 * arch.intermediate_size / tp if activation_checkpointing else 0.0
    if profile.whole_layer_checkpointing and activation_checkpointing:
        recompute = layer_full
    bwd_buffers = root_grad + layer_grads + act_grads + recompute

    if optimizer_foreach is False:
        biggest = max(arch.params_embedding, arch.params_lm_head, arch.hidden_size * arch.intermediate_size) / w
        opt_temp = 2 * 4 * biggest
    else:
        opt_temp = 4 * p_loc
    if cpu_offload:
        opt_temp = 0.0

    base = {"master_weights_fp32": static, "gradients_fp32": grads, "adamw_states_fp32": adam}
    phases_terms = {
        "loss_backward": {**base, "gathered_bf16_params": 2 * arch.params_root / tp, "activations": acts,
                          "logits_fp32": logits_bwd, "reference_model": ref},
        "layer_backward": {**base, "gathered_bf16_params": gathered, "activations": acts,
                           "backward_buffers": bwd_buffers, "reference_model": ref},
        "optimizer": {**base, "optimizer_step_temp": opt_temp, "reference_model": ref},
        "logprob": {"master_weights_fp32": static, "adamw_states_fp32": adam, "gathered_bf16_params": gathered,
                    "activations": b_lp * L // cp * 4 * h / sp_div,
                    "logits_fp32": lp_k * b_lp * L * v / (tp * cp),
                    "reference_model": ref},
    }
    phases = {k: sum(d.values()) / GIB for k, d in phases_terms.items()}
    peak_phase = max(phases, key=phases.get)
    terms = {k: round(x / GIB, 3) for k, x in phases_terms[peak_phase].items() if x}
    notes = [profile.note] if profile.note else []
    if tp > 1 or cp > 1:
        notes.append("tensor / context parallel: the TP and CP splits follow the code, not a measurement (calibrated "
                     "on 1 and 2 GPUs of FSDP2 only)")
    elif w > 2:
        notes.append(f"FSDP2 over {w} GPUs: the sharded terms were measured on 1 and 2 GPUs; more GPUs extrapolate "
                     "the same even split")
    every = {ph: {k: round(x / GIB, 3) for k, x in d.items() if x} for ph, d in phases_terms.items()}
    return TrainingEstimate(round(phases[peak_phase], 3), peak_phase, terms,
                            {k: round(x, 3) for k, x in phases.items()}, int(t), notes, every)
