"""Who may call a model: provider keys, keyless self-hosted servers, and the failures
that no resend can mend (issue 8 item 3, SPEC §9)."""

from __future__ import annotations

import os

# Sent where no key is configured for our own or a self-hosted server: litellm's OpenAI
# client refuses to send without one, and the user's own key must not travel there.
PLACEHOLDER_KEY = "sk-local-no-key"
# litellm exception classes (or HTTP statuses) that resending cannot mend.
_ACCESS = (("AuthenticationError", 401, "credentials refused"),
           ("PermissionDeniedError", 403, "access to the model denied"),
           ("NotFoundError", 404, "model not found"))


def key_variable(model: str, litellm=None) -> str:
    """The environment variable holding the key of `model`'s provider (litellm, when loaded,
    names the ones our map does not know)."""
    from deep_pipeline.secrets import PROVIDER_VARIABLES

    for provider, names in PROVIDER_VARIABLES.items():
        if model.startswith(f"{provider}/"):
            return names[0]
    try:
        missing = (litellm.validate_environment(model).get("missing_keys") or []) if litellm else []
    except Exception:  # noqa: BLE001 - an unknown provider: fall back to litellm's naming
        missing = []
    keys = [name for name in missing if name.endswith("_KEY")]
    return keys[0] if keys else f"{model.split('/', 1)[0].upper()}_API_KEY"


def key_for(model: str, api_base: str | None, api_key: str | None) -> str | None:
    """The key to hand litellm: the configured one, a placeholder for a keyless endpoint,
    else None (litellm reads the environment). Decided in the caller's process, from its
    environment (a model worker's may be another's)."""
    if api_key is None and api_base and not os.environ.get(key_variable(model)):
        return PLACEHOLDER_KEY  # a self-hosted server that wants no key (vLLM, llama.cpp, Ollama)
    return api_key


def access_failure(litellm, error: Exception) -> str | None:
    """What refused the call when resending cannot help; None for any other failure."""
    status = getattr(error, "status_code", None)
    for name, code, problem in _ACCESS:
        kind = getattr(litellm, name, None)
        if (kind is not None and isinstance(error, kind)) or status == code:
            return problem
    return None


def access_line(variable: str | None, role: str, model: str, api_base: str | None, problem: str, error: str) -> str:
    """One line: which role's model was refused, why, and the setting that mends it (`variable`: its key's name)."""
    where = f" at {api_base}" if api_base else ""
    if problem == "model not found":
        fix = f"check {role}_model, or set {role}_api_base to a server that serves it"
    else:
        fix = f"set {variable or key_variable(model)} to a key {'with access to it' if 'denied' in problem else 'the provider accepts'}"
    detail = " ".join(error.split())[:200]
    return f"{role} model {model!r}{where}: {problem} ({detail}); {fix}"
