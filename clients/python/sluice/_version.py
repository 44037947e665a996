"""The sluice version this package belongs to.

The number is owned by the Go module (cmd/sluice/version.go); this is a copy
that TestPythonClientVersion keeps equal to it.
"""

__version__ = "0.1.0"
