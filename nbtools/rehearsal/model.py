"""A tiny Llama and a word-level tokenizer, built in code (no hub download), saved as real HF directories.

Every checkpoint of the rehearsal can become a HuggingFace model directory that ``AutoModelForCausalLM`` and
``AutoTokenizer`` load, exactly like a NeMo-RL checkpoint of a hub model.

Example:
    >>> tok = build_tokenizer()
    >>> model = build_model(cfg, tok)
    >>> save_hf(model, tok, "/tmp/tiny")   # AutoModelForCausalLM.from_pretrained("/tmp/tiny") works
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nbtools import _atomic
from nbtools.rehearsal.task import ASSISTANT_TAG, USER_TAG

if TYPE_CHECKING:
    from nbtools.config import Experiment

__all__ = ["VOCAB", "CHAT_TEMPLATE", "ENV_CORRECT", "ENV_INCORRECT", "build_tokenizer", "build_model", "save_hf"]

SPECIAL = ["<pad>", "<unk>", "<eos>"]
TAGS = [USER_TAG, ASSISTANT_TAG, "<think>", "</think>", "<answer>", "</answer>"]
ENV_CORRECT = "Environment: correct"
ENV_INCORRECT = "Environment: incorrect"
VOCAB: list[str] = SPECIAL + TAGS + ["max"] + [str(d) for d in range(10)] + ["Environment:", "correct", "incorrect"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}" + USER_TAG + " {{ message['content'] }} "
    "{% endif %}{% endfor %}{% if add_generation_prompt %}" + ASSISTANT_TAG + "{% endif %}"
)


def build_tokenizer():
    """WordLevel + WhitespaceSplit tokenizer wrapped in ``PreTrainedTokenizerFast`` (saved as ``tokenizer.json``).

    Only pad/unk/eos are special, so ``decode(..., skip_special_tokens=True)`` keeps the think/answer tags.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def build_model(cfg: Experiment, tok, *, seed: int | None = None):
    """A random-init ``LlamaForCausalLM`` sized by ``cfg.rehearsal`` (tied embeddings, fixed seed)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    r = cfg.rehearsal
    conf = LlamaConfig(
        vocab_size=len(VOCAB),
        hidden_size=r.hidden_size,
        intermediate_size=r.intermediate_size,
        num_hidden_layers=r.num_layers,
        num_attention_heads=r.num_heads,
        num_key_value_heads=r.num_heads,
        max_position_embeddings=max(64, cfg.model.max_total_sequence_length),
        tie_word_embeddings=r.tie_word_embeddings,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        attn_implementation="sdpa",
    )
    torch.manual_seed(cfg.grpo.seed if seed is None else seed)
    model = LlamaForCausalLM(conf)
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, max_new_tokens=r.max_new_tokens, do_sample=False
    )
    return model


def save_hf(model, tok, out_dir: str | Path) -> Path:
    """Write an HF model directory (config, generation config, safetensors, tokenizer) atomically."""
    out = Path(out_dir)
    with _atomic.atomic_dir(out, overwrite=True) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
    return out
