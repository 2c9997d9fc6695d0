"""The package version, in one place: pyproject.toml reads it from here
(scikit-build-core's regex metadata provider), the package re-exports it."""
__version__ = "0.1.0"
