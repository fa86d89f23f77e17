"""Errors a user can act on. The CLI prints each as one line: an InputError exits 2
(nothing was written), a StepError exits 1 (run again to resume once mended)."""


class InputError(Exception):
    """Bad input: the message names the file (and line or JSON path) and what was expected."""


class StepError(Exception):
    """A compile step cannot go on (a model that keeps answering wrong, a vanished folder)."""


class AnswerError(StepError):
    """A model kept answering in a shape that does not validate (after its retries)."""


class ModelAccessError(StepError):
    """The provider refused the model's credentials, its permission or the model itself:
    resending cannot help, so it is never retried; the message names what to set."""


class PromptTooLong(StepError):
    """The prompt is longer than the model's context window: resending cannot help, so it is
    never retried; the message says what was too long and what would fit."""


def one_line(text: str | None, limit: int = 300) -> str:
    """A message as one short line for a person: whitespace folded, any appended traceback
    (litellm adds the provider's to some) cut off; the records keep the whole text."""
    line = " ".join((text or "no reason given").split("Traceback (most recent call last)")[0].split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
