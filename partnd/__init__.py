"""partnd: PART (PAirwise Relative Translations) self-supervised pretraining for N-D signals."""

__version__ = "0.1.0"

__all__ = ["__version__"]
