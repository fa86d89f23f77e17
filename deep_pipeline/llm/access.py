"""Who may call a model: provider keys, keyless self-hosted servers, and the failures
that no resend can mend (SPEC §9)."""

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


def key_for(api_base: str | None, api_key: str | None) -> str | None:
    """The key to hand litellm: the configured one; for a `*_api_base` endpoint without one,
    the placeholder (litellm would otherwise send the provider's key from the environment to
    a server it does not belong to); else None (litellm reads the
    environment)."""
    if api_key is None and api_base:
        return PLACEHOLDER_KEY  # a self-hosted server that wants no key (vLLM, llama.cpp, Ollama)
    return api_key


def role_key(api_base: str | None, key_env: str | None, provider_key: str | None) -> str | None:
    """The key a role sends. To a `*_api_base` endpoint: the value of the variable its
    `<role>_api_key_env` names, else none (key_for's placeholder), never a provider's key.
    To a provider: its key a Dagster resource handed over (None: litellm reads the
    environment). Read in the caller's process, from its environment, at each step: no
    value is ever stored."""
    if api_base:
        return (os.environ.get(key_env) or None) if key_env else None
    return provider_key


def key_env_problem(role: str, key_env: str | None, api_base: str | None) -> str | None:
    """Why a role's named key variable cannot be used, else None: it names the key of the
    role's endpoint, so it needs one, and it must be set and non-empty now."""
    if not key_env:
        return None
    if not api_base:
        return (f"config: {role}_api_key_env: names the key of {role}_api_base, which is not set "
                f"(a provider's key is read from its own variable, such as OPENAI_API_KEY)")
    if not os.environ.get(key_env):
        return (f"config: {role}_api_key_env: {key_env} is not set in the environment "
                f"(expected the name of a variable holding the key of {role}_api_base)")
    return None


def access_failure(litellm, error: Exception) -> str | None:
    """What refused the call when resending cannot help; None for any other failure."""
    status = getattr(error, "status_code", None)
    for name, code, problem in _ACCESS:
        kind = getattr(litellm, name, None)
        if (kind is not None and isinstance(error, kind)) or status == code:
            return problem
    return None


def access_line(variable: str | None, role: str, model: str, api_base: str | None, problem: str, error: str,
                key_env: str | None = None, model_setting: str | None = None) -> str:
    """One line: which role's model was refused, why, and the setting that mends it (`variable`:
    its provider key's name; `key_env`: the variable the role's `<role>_api_key_env` names;
    `model_setting`: the setting naming the model, when not `<role>_model`: a judge panel's)."""
    where = f" at {api_base}" if api_base else ""
    which = "with access to it" if "denied" in problem else "the endpoint accepts" if api_base else "the provider accepts"
    if problem == "model not found":
        fix = f"check {model_setting or f'{role}_model'}, or set {role}_api_base to a server that serves it"
    elif key_env:
        fix = f"set {key_env} (named by {role}_api_key_env) to a key {which}"
    elif api_base:  # a self-hosted endpoint gets no provider key: the role names its own
        fix = f"set {role}_api_key_env to the name of a variable holding a key {role}_api_base ({api_base}) accepts"
    else:
        fix = f"set {variable or key_variable(model)} to a key {which}"
    detail = " ".join(error.split())[:200]
    return f"{role} model {model!r}{where}: {problem} ({detail}); {fix}"
