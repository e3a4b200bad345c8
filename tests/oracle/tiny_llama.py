"""The tiny Llama (and word-level tokenizer) the checkpoint oracles save with upstream's own writers; built in code,
nothing downloaded. A sibling module of the scripts that run in the oracle venvs (their folder is on sys.path)."""

from __future__ import annotations

import torch

VOCAB = 103  # does not divide by 2 ranks: uneven FSDP shards


def base_model(path: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=72, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1,
                      eos_token_id=2, pad_token_id=0, tie_word_embeddings=False, architectures=["LlamaForCausalLM"])
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    words = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3} | {f"w{i}": i for i in range(4, VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(path)
