"""Converts an NVIDIA Parakeet .nemo into mlx-community's folder layout (what parakeet-mlx and omnid read).

    .venv/bin/python scripts/parakeet_to_mlx.py model.nemo OUT_FOLDER
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import omnid  # noqa: E402,F401  (OpenBLAS before mlx)
from omnid.engine.parakeet.convert import to_mlx_folder  # noqa: E402

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(to_mlx_folder(Path(sys.argv[1]), Path(sys.argv[2])))
