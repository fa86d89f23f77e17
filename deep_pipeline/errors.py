"""Errors a user can act on. The CLI prints them as one line and exits 2."""


class InputError(Exception):
    """Bad input: the message names the file (and line or JSON path) and what was expected."""


class StepError(Exception):
    """A compile step cannot go on (a model that keeps answering wrong, a vanished folder)."""


class AnswerError(StepError):
    """A model kept answering in a shape that does not validate (after its retries)."""
