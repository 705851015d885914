"""Expected failures. The CLIs print these as one line and exit non-zero."""


class LenetError(Exception):
    """Base class of every expected, user-facing failure."""


class InputError(LenetError, ValueError):
    """An argument (array, label, option) is not what the API accepts."""


class WeightsError(LenetError, ValueError):
    """A weights file is missing, corrupted or has the wrong tensors."""


class DataError(LenetError, ValueError):
    """A dataset or image file is missing or malformed."""


class TrainingError(LenetError, ArithmeticError):
    """Training cannot go on: the loss diverged to NaN or infinity."""


class UnavailableError(LenetError, RuntimeError):
    """A backend or device cannot run here; the message says why."""
