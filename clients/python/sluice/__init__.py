"""sluice: run Claude API jobs on every key at once, from Python.

A standard-library-only front end to the `sluice` binary that keeps the old
system's signatures: ``judge_completions_batch`` runs ``sluice judge``,
``dispatch_calls`` runs ``sluice run``; each has an ``_async`` variant that
does not block the event loop. The binary is found from $SLUICE_BIN, then
PATH. See README.md beside this package, and docs/python.md in the
repository.
"""

from ._proc import Progress, SluiceError, SluiceInterrupted, SluiceNotFound, find_binary
from ._version import __version__
from .dispatch import (RESULT_ERROR, RESULT_OK, RESULT_RATE_LIMITED, RESULT_TRANSPORT, DispatchItem, DispatchResult,
                       DispatchRoute, dispatch_calls, dispatch_calls_async)
from .judge import IgnoredParameterWarning, judge_completions_batch, judge_completions_batch_async

__all__ = [
    "__version__", "find_binary", "Progress", "SluiceError", "SluiceInterrupted", "SluiceNotFound",
    "IgnoredParameterWarning", "judge_completions_batch", "judge_completions_batch_async",
    "DispatchItem", "DispatchResult", "DispatchRoute", "dispatch_calls", "dispatch_calls_async",
    "RESULT_OK", "RESULT_ERROR", "RESULT_RATE_LIMITED", "RESULT_TRANSPORT",
]
