"""omnid: a streaming speech-to-text daemon on MLX."""

from omnid import blas as _blas

# Must run before anything imports mlx.core (see omnid/blas.py).
_blas.preload()

__version__ = "0.1.0"
