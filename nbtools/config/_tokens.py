"""Recognise credentials pasted where a NAME belongs, and show values without revealing them.

Why: ``secrets:`` and ``trainer.env_vars`` hold names of environment variables and Kubernetes Secrets; a token
pasted there would be written in clear into manifests, plan scripts, job metadata and error messages. The shapes
below are the published formats of the tokens GRPO users hold (Hugging Face, W&B, GitHub, OpenAI-style keys,
cloud keys) plus a generic "long random string" rule; a name of an env var (``HF_TOKEN``) or a Kubernetes
Secret (``hf-token``) matches none of them. A dedicated scanner (e.g. detect-secrets) works on whole files and
would add a dependency for the dozen patterns that matter here.

Example:
    >>> token_kind("hf_" + "a1B2" * 9)
    'a Hugging Face token'
    >>> token_kind("HF_TOKEN") is None
    True
    >>> redact("hf_" + "a1B2" * 9)
    '<redacted, 39 chars>'
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from typing import Any

__all__ = ["token_kind", "redact", "SECRET_ENV", "secret_values", "secret_leaks", "scrub_secrets"]

SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "NGC_API_KEY")  # always scanned for
_SECRET_KEY = re.compile(r"(token|secret|password|passwd|api_key|apikey|credential|(^|[._])key$)", re.IGNORECASE)

_PREFIXES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"hf_[A-Za-z0-9]{16,}"), "a Hugging Face token"),
    (re.compile(r"api_org_[A-Za-z0-9]{16,}"), "a Hugging Face organisation token"),
    (re.compile(r"(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), "a GitHub token"),
    (re.compile(r"sk-[A-Za-z0-9_\-]{16,}"), "an API secret key (sk-...)"),
    (re.compile(r"(sk|rk)_(live|test)_[A-Za-z0-9]{16,}"), "an API secret key"),
    (re.compile(r"xox[abposr]-[A-Za-z0-9\-]{10,}"), "a Slack token"),
    (re.compile(r"glpat-[A-Za-z0-9_\-]{16,}"), "a GitLab token"),
    (re.compile(r"nvapi-[A-Za-z0-9_\-]{16,}"), "an NVIDIA API key"),
    (re.compile(r"(AKIA|ASIA)[0-9A-Z]{16}"), "an AWS access key"),
    (re.compile(r"AIza[0-9A-Za-z_\-]{30,}"), "a Google API key"),
    (re.compile(r"ya29\.[0-9A-Za-z_\-]{16,}"), "a Google OAuth token"),
    (re.compile(r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.?"), "a JSON Web Token"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY"), "a private key"),
]
_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9_\-+=]+$")
_HEX = re.compile(r"[0-9a-fA-F]{32,}")  # W&B API keys are 40 hex characters; 32+ hex is a key or a digest


def _entropy(s: str) -> float:
    counts = Counter(s)
    return -sum(c / len(s) * math.log2(c / len(s)) for c in counts.values())


def token_kind(value: Any, *, names: bool = True) -> str | None:
    """What kind of credential ``value`` looks like (e.g. 'a Hugging Face token'), or None for a plain name.

    Args:
        value: the text to check (anything else is not a token).
        names: the field holds a NAME (secrets.*): any random-looking string of 20+ characters is suspect.
            False for free-form values (``trainer.env_vars``), where only 32+ characters of high entropy are.

    Example:
        >>> token_kind("0123456789abcdef0123456789abcdef01234567")
        '40 hexadecimal characters (the shape of a W&B API key)'
    """
    if not isinstance(value, str):
        return None
    s = value.strip()
    for pattern, kind in _PREFIXES:
        if pattern.search(s):
            return kind
    m = _HEX.search(s)
    if m:
        n = len(m.group())
        return f"{n} hexadecimal characters" + (" (the shape of a W&B API key)" if n == 40 else "")
    if len(s) >= 20 and _TOKEN_CHARS.match(s):  # no '/' or '.': paths and model ids are not tokens
        lower, upper, digit = (bool(re.search(p, s)) for p in ("[a-z]", "[A-Z]", "[0-9]"))
        h = _entropy(s)
        if names and ((lower and upper and digit and h >= 3.5) or (len(s) >= 32 and digit and h >= 4.0)):
            return "a long random string (an API key or token)"
        if len(s) >= 32 and digit and (lower or upper) and h >= 4.2:
            return "a long random string (an API key or token)"
    return None


def redact(value: Any) -> str:
    """A stand-in that says how long a value is without showing any of it.

    Example:
        >>> redact("secret-value")
        '<redacted, 12 chars>'
    """
    text = value if isinstance(value, str) else repr(value)
    return f"<redacted, {len(text)} chars>"


def secret_values(data: dict[str, Any]) -> dict[str, str]:
    """{env var name: value} of the secrets this environment holds that no output may contain.

    The names: the usual token variables, every ``secrets.*.env`` the experiment names, and secret-looking
    ``trainer.env_vars`` keys. Values shorter than 8 characters are too common to scan for.
    """
    names = set(SECRET_ENV)
    secrets = data.get("secrets") if isinstance(data, dict) else None
    for ref in (secrets or {}).values() if isinstance(secrets, dict) else ():
        if isinstance(ref, dict) and isinstance(ref.get("env"), str) and ref["env"]:
            names.add(ref["env"])
    trainer = data.get("trainer") if isinstance(data, dict) else None
    env = trainer.get("env_vars") if isinstance(trainer, dict) else None
    names |= {k for k in (env or {}) if isinstance(k, str) and _SECRET_KEY.search(k)} if isinstance(env, dict) else set()
    return {n: os.environ[n] for n in sorted(names) if len(os.environ.get(n, "")) >= 8}


def _leaves(x: Any, key: str = ""):
    if isinstance(x, dict):
        for k, v in x.items():
            sub = f"{key}.{k}" if key else str(k)
            yield sub, str(k)
            yield from _leaves(v, sub)
    elif isinstance(x, list | tuple):
        for i, v in enumerate(x):
            yield from _leaves(v, f"{key}[{i}]")
    elif isinstance(x, str):
        yield key, x


def secret_leaks(data: dict[str, Any], secrets: dict[str, str]) -> list[str]:
    """One problem per config key whose text holds the value of a secret (naming the variable, never the value)."""
    out = []
    for key, text in _leaves(data):
        for name, value in secrets.items():
            if value in text:
                out.append(f"{scrub_secrets(key, secrets)}: holds the value of ${name}, which would be written into "
                           f"manifests, plans, job metadata and messages; fix: remove it and reference the secret by "
                           f"name under `secrets:` (e.g. secrets.hf_token.env: {name})")
    return out


def scrub_secrets(text: str, secrets: dict[str, str]) -> str:
    """``text`` with every secret value replaced by ``<value of $NAME>``."""
    for name, value in secrets.items():
        text = text.replace(value, f"<value of ${name}>")
    return text
