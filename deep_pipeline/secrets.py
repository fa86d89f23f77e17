"""Secrets, one owner for each fact: which variable names hold one, how their values are
blanked out of what we write, and which variables each model provider reads.

The agent sandbox, the calls log, the local model server's environment, the key messages
and the Dagster key resource all use these, so a key reaches no record, log or report. Standard library only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import TypeVar

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
# Shorter values ("1", "true", a port) would blank out ordinary text wherever they occur.
MIN_SECRET_CHARS = 8
REDACTED = "<redacted>"

# litellm provider (the model string's prefix before "/") -> the variables it reads, its key first.
PROVIDER_VARIABLES: dict[str, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "openrouter": ("OPENROUTER_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY",),
    "xai": ("XAI_API_KEY",),
}


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The values of `env`'s secret-looking variables, long enough to blank out safely."""
    return [value for name, value in env.items() if SECRET_NAME.search(name) and len(value) >= MIN_SECRET_CHARS]


Data = TypeVar("Data", str, bytes)


def redact(data: Data, secrets: Iterable[str] | None = None) -> Data:
    """`data` (text or bytes) with every secret value replaced by `<redacted>`; without
    `secrets`, those of our own environment (for what we log, such as a provider's error)."""
    if secrets is None:
        secrets = secret_values(os.environ)
    # Longest first: a secret that is a prefix of another must not leave the other's tail readable.
    for secret in sorted(set(secrets), key=len, reverse=True):
        if isinstance(data, bytes):
            data = data.replace(secret.encode("utf-8"), REDACTED.encode("utf-8"))
        else:
            data = data.replace(secret, REDACTED)
    return data
