"""NVIDIA's ``.nemo`` to mlx-community's folder (the layout parakeet-mlx reads: neither it nor mlx-audio ships a
converter): ``config.json`` is the .nemo's config (references resolved) with the SentencePiece pieces as
``joint.vocabulary`` (a CTC model's as ``decoder.vocabulary``: its decoder is the CTC head); ``model.safetensors``
holds the state dict under NeMo's names in MLX's layouts (convolutions channels-last, each LSTM layer as ``Wx``,
``Wh`` and one bias, NeMo's two summed), without the front end's buffers.
"""

from __future__ import annotations

from pathlib import Path

from omnid.engine.errors import CheckpointError
from omnid.engine.nemo.mlx_folder import mlx_tensors, save_folder
from omnid.engine.nemo.transducer_checkpoint import ctc_model, nemo_file
from omnid.engine.parakeet.checkpoint import read_nemo


def to_mlx_folder(path: Path, out: Path) -> Path:
    """Writes ``out``/config.json and ``out``/model.safetensors from the .nemo at ``path``; returns ``out``."""
    nemo = nemo_file(path)
    if nemo is None:
        raise CheckpointError(f"{path}: not a .nemo file or a folder holding exactly one")
    read, _, _, vocabulary = read_nemo(nemo)  # refuses what omnid would refuse
    config = dict(read.config)
    key = "decoder" if ctc_model(config) else "joint"  # a CTC model's vocabulary is its head's, as parakeet-mlx reads
    config[key] = {**config[key], "vocabulary": list(vocabulary.pieces)}
    save_folder(out, config, mlx_tensors(read.state))
    return out
