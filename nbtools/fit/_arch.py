"""Model architecture facts from a Hugging Face ``config.json``: sizes, parameter counts, KV-cache bytes per token.

Why: every memory term of a GRPO step is a product of a few architecture numbers (vocabulary, hidden size, layers,
heads, head dim, MLP width, tied embeddings); reading them from the model's own ``config.json`` needs no weights.

Resolution order for ``resolve_arch(model)``: a :class:`ModelArch`; a dict (a parsed ``config.json``); a path to a
``config.json`` or a directory holding one; a Hub id found in the configs shipped with nbtools
(``nbtools/data/model_configs/<org>--<name>.json``); ``transformers.AutoConfig.from_pretrained`` (downloads only
the config).

Example:
    >>> arch = resolve_arch("google/gemma-3-1b-it")
    >>> arch.vocab_size, arch.num_layers, round(arch.params / 1e9, 2)
    (262144, 26, 1.0)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from nbtools.errors import ConfigError, NotFoundError

__all__ = ["ModelArch", "resolve_arch", "shipped_models"]

_GEMMA = ("gemma3_text", "gemma3", "gemma2", "gemma")
_QK_NORM = ("qwen3", "qwen3_moe", "olmo2", "gemma3_text", "gemma3")
_BIAS_QKV = ("qwen2",)


@dataclass(frozen=True)
class ModelArch:
    """The numbers of a decoder-only transformer that its memory depends on."""

    name: str
    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    tie_word_embeddings: bool
    sliding_window: int | None = None  # window of the sliding-attention layers (None: every layer is global)
    num_sliding_layers: int = 0
    extra_params: int = 0  # e.g. a vision tower loaded with the language model

    # -- kinds of layer ------------------------------------------------------------------------------------
    @property
    def gemma_norms(self) -> bool:
        """Gemma's RMSNorm computes in fp32 and keeps two fp32 copies; Gemma-2/3 layers have four norms."""
        return self.model_type in _GEMMA

    @property
    def qk_norm(self) -> bool:
        """Per-head RMSNorm on queries and keys (Qwen3, Gemma-3)."""
        return self.model_type in _QK_NORM

    # -- parameter counts ----------------------------------------------------------------------------------
    @property
    def params_embedding(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def params_lm_head(self) -> int:
        """0 when tied to the embedding (one parameter, counted once)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def params_layer(self) -> int:
        """One decoder layer: q/k/v/o projections (+ biases), gated MLP, norms."""
        h, hd = self.hidden_size, self.head_dim
        q, kv = self.num_heads * hd, self.num_kv_heads * hd
        attn = h * q + 2 * h * kv + q * h
        if self.model_type in _BIAS_QKV:
            attn += q + 2 * kv
        norms = (4 if self.gemma_norms else 2) * h + (2 * hd if self.qk_norm else 0)
        return attn + 3 * h * self.intermediate_size + norms

    @property
    def params_root(self) -> int:
        """What FSDP2's root group holds: embedding, untied LM head, final norm."""
        return self.params_embedding + self.params_lm_head + self.hidden_size

    @property
    def params(self) -> int:
        return self.params_root + self.num_layers * self.params_layer + self.extra_params

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """vLLM's KV cache per token: layers x KV heads x head dim x 2 (K and V) x dtype bytes."""
        return self.num_layers * self.num_kv_heads * self.head_dim * 2 * dtype_bytes

    # -- construction --------------------------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: dict[str, Any], name: str = "") -> ModelArch:
        """Read the fields from a ``config.json`` dict (a multimodal one: its ``text_config``)."""
        extra = 0
        if isinstance(config.get("text_config"), dict):
            vision = config.get("vision_config") or {}
            if isinstance(vision, dict) and vision.get("hidden_size") and vision.get("num_hidden_layers"):
                vh = _size(vision["hidden_size"], "vision_config.hidden_size", name)
                vi = _size(vision.get("intermediate_size", 4 * vh), "vision_config.intermediate_size", name)
                extra = _size(vision["num_hidden_layers"], "vision_config.num_hidden_layers", name) * (4 * vh * vh + 2 * vh * vi)
            text = {**config["text_config"]}
            text.setdefault("model_type", config.get("model_type", ""))
            if text.get("model_type") == "gemma3_text":
                text.setdefault("vocab_size", 262208)  # Gemma3TextConfig's default; the 27B config leaves it out
            config = text
        for k in _SIZE_KEYS:  # sizes: positive whole numbers of a sane magnitude, or absent where optional
            if config.get(k) is not None:
                config = {**config, k: _size(config[k], k, name)}
        missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                               "intermediate_size") if not config.get(k)]
        if missing:
            raise ConfigError(
                f"config.json of {name or 'the model'} lacks {', '.join(missing)}; expected a decoder-only causal LM "
                "config (Llama, Qwen, Gemma, Mistral ...); fix: pass the model's own config.json (a path, a dict or "
                "its Hugging Face id)"
            )
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        model_type = str(config.get("model_type", ""))
        window = config.get("sliding_window")
        n_sliding = 0
        if isinstance(config.get("layer_types"), list):
            n_sliding = sum(1 for t in config["layer_types"] if "sliding" in str(t))
        elif window and model_type in ("gemma3_text", "gemma3"):
            pattern = int(config.get("sliding_window_pattern") or 6)  # every 6th layer is global
            n_sliding = layers - layers // pattern
        elif window and config.get("use_sliding_window"):
            n_sliding = layers
        return cls(
            name=name or str(config.get("_name_or_path", "")),
            model_type=model_type,
            vocab_size=int(config["vocab_size"]),
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate_size=int(config["intermediate_size"]),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", model_type in _GEMMA)),
            sliding_window=int(window) if window and n_sliding else None,
            num_sliding_layers=n_sliding,
            extra_params=extra,
        )


_SIZE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "num_key_value_heads", "head_dim", "sliding_window", "sliding_window_pattern")
_MAX_SIZE = 1 << 40  # no dimension of a real model comes near it


def _size(value: Any, key: str, name: str) -> int:
    """``value`` as a positive int, or a ConfigError naming the key and the fix (negative, fractional, NaN, huge)."""
    where = f"config.json of {name or 'the model'}"
    ok = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value, ok = int(value), True
    if not ok or not 0 < value <= _MAX_SIZE:
        shown = (repr(value) if not isinstance(value, int) or abs(value) < 10**18
                 else f"an integer of about {int(abs(value).bit_length() * 0.30103) + 1} digits")  # str() may refuse it
        raise ConfigError(f"{where}: {key} must be a positive whole number (at most 2**40), got {shown}; fix: pass the "
                          "model's own config.json (sizes are positive integers such as hidden_size: 2048)")
    return value


def _load_json(f: Path | Any, shown: str) -> dict[str, Any]:
    """A config.json as a dict; NaN / Infinity, a huge integer or a non-object top level are ConfigErrors."""

    def constant(c: str) -> float:
        raise ConfigError(f"{shown}: {c} is not a valid JSON value in a model config; fix: pass the model's own "
                          "config.json (sizes are positive integers)")

    try:
        data = json.loads(f.read_text(), parse_constant=constant)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{shown} is not valid JSON ({e}); fix: pass the model's config.json") from e
    except ValueError as e:  # e.g. an integer longer than Python's int-string limit
        raise ConfigError(f"{shown}: {str(e)[:160]}; fix: pass the model's own config.json (sizes are positive "
                          "integers)") from e
    except RecursionError as e:
        raise ConfigError(f"{shown} nests too deeply to be a model config; fix: pass the model's config.json") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{shown} holds a JSON {type(data).__name__}, not an object; fix: pass the model's "
                          "config.json (a JSON object of fields such as hidden_size)")
    return data


def _shipped_dir():
    return resources.files("nbtools") / "data" / "model_configs"


def shipped_models() -> list[str]:
    """Hub ids whose ``config.json`` ships with nbtools (usable with no network)."""
    return sorted(p.name[: -len(".json")].replace("--", "/", 1) for p in _shipped_dir().iterdir()
                  if p.name.endswith(".json"))


def resolve_arch(model: ModelArch | dict | str | Path) -> ModelArch:
    """A :class:`ModelArch` from a config dict, a path, a shipped Hub id, or ``AutoConfig`` (config only).

    Raises:
        NotFoundError: a path without a config.json, or a Hub id that is not shipped and cannot be fetched here.

    Example:
        >>> resolve_arch("Qwen/Qwen2.5-1.5B").hidden_size
        1536
    """
    if isinstance(model, ModelArch):
        return model
    if isinstance(model, dict):
        return ModelArch.from_config(model, name=str(model.get("_name_or_path", "")))
    if not isinstance(model, (str, Path)):
        raise ConfigError(f"model must be a config.json path, a dict, a Hub id or a ModelArch, got "
                          f"{type(model).__name__}; fix: pass e.g. 'Qwen/Qwen2.5-1.5B'")
    text = str(model)
    p = Path(text).expanduser()
    if p.is_dir() or p.suffix == ".json" or text.startswith((".", "/", "~")):
        f = p / "config.json" if p.is_dir() else p
        if not f.is_file():
            raise NotFoundError(f"expected a config.json at {f}, found none",
                                fix="pass the model directory (with config.json), the file itself, or a Hub id")
        return ModelArch.from_config(_load_json(f, str(f)), name=text)
    shipped = _shipped_dir() / (text.replace("/", "--", 1) + ".json")
    if shipped.is_file():
        return ModelArch.from_config(_load_json(shipped, text), name=text)
    return _auto_config(text)


def _hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` as it is now (huggingface_hub reads it once, at import)."""
    import os

    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _hub_unreachable() -> str | None:
    """Why the Hub cannot be reached, else None: one 3-second connect instead of huggingface_hub's retries with
    back-off (23 s here, offline) before the same verdict."""
    import os
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)),
                                 timeout=3).close()
    except OSError as e:
        return f"{url.hostname} is unreachable from here: {e}"
    return None


def _auto_config(hub_id: str) -> ModelArch:
    try:
        from transformers import AutoConfig

        offline = _hub_offline()
        if not offline and (why := _hub_unreachable()) is not None:
            raise OSError(why)
        cfg = AutoConfig.from_pretrained(hub_id, trust_remote_code=False, local_files_only=offline)
    except Exception as e:  # noqa: BLE001 - offline, gated, unknown id: all end in the same fix
        raise NotFoundError(
            f"no config.json for {hub_id!r}: it is not among the configs shipped with nbtools "
            f"({', '.join(shipped_models())}) and AutoConfig could not fetch it ({type(e).__name__}: {str(e)[:160]})",
            fix="pass a local path to the model's config.json (or its directory), or go online and set HF_TOKEN "
            "for gated models",
        ) from e
    return ModelArch.from_config(cfg.to_dict(), name=hub_id)
