"""The generation worker: a lean Llama decode with a KV cache, refitted from the trained policy before each rollout.

NeMo-RL generates with vLLM, a second implementation of the same model that receives the policy's weights after every
update ("refit") and whose logprobs are compared with the training framework's (``train/token_mult_prob_error``,
``train/gen_kl_error``). :class:`Engine` plays that role here: it copies the policy's parameters (all-gathering them
from FSDP2 shards when the policy is sharded) into plain tensors and decodes with ~30 tensor ops per layer and token
instead of HF's module stack, so generation costs a fraction of an HF ``generate`` loop on a CPU. Its numerics follow
``transformers``' Llama (RMSNorm, default RoPE, SDPA attention), checked against HF ``generate`` and HF logprobs in
the tests.

Example:
    >>> engine = Engine(model.config)
    >>> engine.refit(model)                               # collective when the model is FSDP2-sharded
    >>> s = engine.sample(prompt_ids, max_new_tokens=12, eos_id=2, pad_id=0, temperature=1.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from nbtools.errors import ConfigError

__all__ = ["Samples", "Engine", "sample", "fsdp_modules"]


@dataclass
class Samples:
    """Generated tokens ``[B, T]`` (pad after eos), their sampling logprobs, and per-row lengths (eos included).

    ``T`` is the number of decode steps run: ``max_new_tokens``, or fewer when every row ended with eos earlier.
    """

    tokens: torch.Tensor
    logprobs: torch.Tensor
    lengths: torch.Tensor
    finished: torch.Tensor  # True where an eos was generated within max_new_tokens


def fsdp_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The FSDP2 modules inside ``model`` (empty for a plain model)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch without FSDP2
        return []
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def _rope_type(config) -> str:
    params = getattr(config, "rope_parameters", None) or {}
    return str(params.get("rope_type", "default"))


class Engine:
    """A plain-tensor copy of a ``LlamaForCausalLM`` policy that samples with a KV cache (vLLM's role in NeMo-RL).

    Weights are fused on refit (q/k/v into one matrix, gate/up into one) like vLLM's Llama; everything else follows
    ``transformers.models.llama.modeling_llama`` op for op.
    """

    def __init__(self, config):
        problems = []
        if getattr(config, "model_type", None) != "llama":
            problems.append(f"model_type {getattr(config, 'model_type', None)!r} (only 'llama')")
        if getattr(config, "hidden_act", "silu") != "silu":
            problems.append(f"hidden_act {config.hidden_act!r} (only 'silu')")
        if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
            problems.append("attention/MLP biases")
        if _rope_type(config) != "default":
            problems.append(f"rope_type {_rope_type(config)!r} (only 'default')")
        if problems:
            raise ConfigError(f"the rehearsal's generation engine does not support {', '.join(problems)}; fix: use the "
                              "tiny Llama that nbtools.rehearsal.model.build_model makes")
        self.nh, self.nkv = config.num_attention_heads, config.num_key_value_heads
        self.hd = getattr(config, "head_dim", None) or config.hidden_size // self.nh
        self.eps = config.rms_norm_eps
        self.num_layers = config.num_hidden_layers
        theta = config.rope_parameters["rope_theta"]
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.hd, 2, dtype=torch.float) / self.hd))
        self.weights: dict[str, torch.Tensor] = {}

    @classmethod
    def from_model(cls, model) -> Engine:
        engine = cls(model.config)
        engine.refit(model)
        return engine

    # -- refit ------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def refit(self, model) -> None:
        """Copy the policy's current weights (collective on FSDP2: each sharded group is all-gathered once)."""
        sharded = fsdp_modules(model)
        for m in sharded:
            m.unshard()
        try:
            inner = model.model
            w = {"embed": inner.embed_tokens.weight.detach().clone(), "norm": inner.norm.weight.detach().clone(),
                 "lm_head": model.lm_head.weight.detach().clone()}
            for i, layer in enumerate(inner.layers):
                a, mlp = layer.self_attn, layer.mlp
                w[f"{i}.ln1"] = layer.input_layernorm.weight.detach().clone()
                w[f"{i}.ln2"] = layer.post_attention_layernorm.weight.detach().clone()
                w[f"{i}.qkv"] = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach()
                w[f"{i}.o"] = a.o_proj.weight.detach().clone()
                w[f"{i}.gate_up"] = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach()
                w[f"{i}.down"] = mlp.down_proj.weight.detach().clone()
        finally:
            for m in sharded:
                m.reshard()
        self.weights = w

    # -- forward ----------------------------------------------------------------------------------------------
    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[:, None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def _forward(self, ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: list) -> torch.Tensor:
        """Logits at the last position of ``ids`` [B, T]; appends this chunk's keys/values to ``cache``."""
        w, nh, nkv, hd, eps = self.weights, self.nh, self.nkv, self.hd, self.eps
        bsz, t = ids.shape
        x = F.embedding(ids, w["embed"])
        for i in range(self.num_layers):
            h = F.rms_norm(x, (x.shape[-1],), w[f"{i}.ln1"], eps)
            q, k, v = F.linear(h, w[f"{i}.qkv"]).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
            q = self._rotate(q.view(bsz, t, nh, hd).transpose(1, 2), cos, sin)
            k = self._rotate(k.view(bsz, t, nkv, hd).transpose(1, 2), cos, sin)
            v = v.view(bsz, t, nkv, hd).transpose(1, 2)
            if len(cache) > i:
                k, v = torch.cat((cache[i][0], k), dim=2), torch.cat((cache[i][1], v), dim=2)
                cache[i] = (k, v)
            else:
                cache.append((k, v))
            if nkv != nh:
                k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, scale=hd**-0.5)
            x = x + F.linear(a.transpose(1, 2).reshape(bsz, t, nh * hd), w[f"{i}.o"])
            gate, up = F.linear(F.rms_norm(x, (x.shape[-1],), w[f"{i}.ln2"], eps), w[f"{i}.gate_up"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, w[f"{i}.down"])
        return F.linear(F.rms_norm(x[:, -1], (x.shape[-1],), w["norm"], eps), w["lm_head"]).float()

    # -- sampling ---------------------------------------------------------------------------------------------
    @torch.no_grad()
    def sample(self, prompt_ids: torch.Tensor, *, max_new_tokens: int, eos_id: int, pad_id: int,
               temperature: float = 1.0, generator: torch.Generator | None = None) -> Samples:
        """Sample (``temperature > 0``) or greedy-decode (``temperature == 0``) continuations of equal-length prompts.

        Stops as soon as every row has produced eos (no collective runs here, so ranks may stop at different steps).
        """
        if not self.weights:
            raise RuntimeError("Engine.sample before Engine.refit(model); fix: call refit first")
        bsz, plen = prompt_ids.shape
        cos_all, sin_all = self._rope(torch.arange(plen + max_new_tokens))
        tokens = torch.full((bsz, max_new_tokens), pad_id, dtype=torch.long)
        logprobs = torch.zeros((bsz, max_new_tokens))
        done = torch.zeros(bsz, dtype=torch.bool)
        lengths = torch.full((bsz,), max_new_tokens, dtype=torch.long)
        # Prefill each distinct prompt once (a GRPO batch repeats every prompt G times), then expand its cache.
        uniq, inverse = torch.unique(prompt_ids, dim=0, return_inverse=True)
        cache: list = []
        logits = self._forward(uniq, cos_all[:plen], sin_all[:plen], cache)[inverse]
        cache = [(k[inverse], v[inverse]) for k, v in cache]
        steps = 0
        for t in range(max_new_tokens):
            if temperature > 0:
                lp = torch.log_softmax(logits / temperature, dim=-1)
                nxt = torch.multinomial(lp.exp(), 1, generator=generator).squeeze(1)
            else:
                lp = torch.log_softmax(logits, dim=-1)
                nxt = lp.argmax(-1)
            chosen = lp.gather(1, nxt[:, None]).squeeze(1)
            nxt = nxt.masked_fill(done, pad_id)
            tokens[:, t] = nxt
            logprobs[:, t] = chosen.masked_fill(done, 0.0)
            newly = (~done) & (nxt == eos_id)
            lengths = torch.where(newly, t + 1, lengths)
            done = done | newly
            steps = t + 1
            if bool(done.all()) or steps == max_new_tokens:
                break
            pos = plen + t
            logits = self._forward(nxt[:, None], cos_all[pos : pos + 1], sin_all[pos : pos + 1], cache)
        return Samples(tokens=tokens[:, :steps].contiguous(), logprobs=logprobs[:, :steps].contiguous(),
                       lengths=lengths, finished=done)


def sample(model: torch.nn.Module, prompt_ids: torch.Tensor, *, max_new_tokens: int, eos_id: int, pad_id: int,
           temperature: float = 1.0, generator: torch.Generator | None = None) -> Samples:
    """One-off sampling from an HF Llama (plain or FSDP2-sharded; collective then): refit an :class:`Engine`, sample.

    Example:
        >>> s = sample(model, ids, max_new_tokens=12, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=0)
    """
    return Engine.from_model(model).sample(prompt_ids, max_new_tokens=max_new_tokens, eos_id=eos_id, pad_id=pad_id,
                                           temperature=temperature, generator=generator)
