"""Nothing private leaves in a card: secrets by name only, no value of a secret, no path of the user's home.

Why: a model card is made to be published. The experiment config names its secrets (``secrets.hf_token.env``), but a
user may still have typed a token into ``trainer.env_vars`` or an override; those values are redacted, and every
text is scanned for the values of the secrets in this environment before anything is written.

Example:
    >>> data = redact(to_dict(cfg))
    >>> check("README.md", text, secret_values(cfg_dict))
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from nbtools.errors import ConfigError

__all__ = ["SECRET_ENV", "redact", "secret_values", "check", "scrub_home"]

SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "NGC_API_KEY")  # always scanned for
_SECRET_KEY = re.compile(r"(token|secret|password|passwd|api_key|apikey|credential|(^|[._])key$)", re.IGNORECASE)
_REDACTED = "<redacted: reference it under secrets: by name>"


def redact(data: dict[str, Any]) -> dict[str, Any]:
    """The config dict with secret-looking ``trainer.env_vars`` values and ``key=value`` overrides redacted."""
    trainer = dict(data.get("trainer") or {})
    env = trainer.get("env_vars") or {}
    trainer["env_vars"] = {k: (_REDACTED if _SECRET_KEY.search(k) else v) for k, v in env.items()}
    out = []
    for o in trainer.get("overrides") or []:
        key, sep, _ = str(o).partition("=")
        out.append(f"{key}={_REDACTED}" if sep and _SECRET_KEY.search(key.split(".")[-1]) else o)
    trainer["overrides"] = out
    return {**data, "trainer": trainer}


def secret_values(data: dict[str, Any]) -> dict[str, str]:
    """{env var name: value} for every secret this environment holds that the card must never contain."""
    names = set(SECRET_ENV)
    for ref in (data.get("secrets") or {}).values():
        if isinstance(ref, dict) and ref.get("env"):
            names.add(ref["env"])
    names |= {k for k in ((data.get("trainer") or {}).get("env_vars") or {}) if _SECRET_KEY.search(k)}
    return {n: os.environ[n] for n in sorted(names) if len(os.environ.get(n, "")) >= 8}


def check(label: str, text: str, secrets: dict[str, str]) -> None:
    """Refuse (before anything is written) when ``text`` contains the value of a secret.

    Raises:
        ConfigError: naming the env var whose value leaked, never the value.
    """
    leaked = sorted(n for n, v in secrets.items() if v in text)
    if leaked:
        raise ConfigError(f"the model card's {label} would contain the value of ${', $'.join(leaked)}; nothing was "
                          "written; fix: remove that value from the experiment config and reference the secret by "
                          "name under `secrets:` (e.g. secrets.hf_token.env: HF_TOKEN)")


def scrub_home(text: str) -> str:
    """Replace the user's home directory with ``~`` (paths a card shows must not name the machine's user)."""
    home = str(Path.home()).rstrip("/")
    return text.replace(home + "/", "~/").replace(home, "~") if len(home) > 1 else text
