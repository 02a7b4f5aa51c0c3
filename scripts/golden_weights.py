"""What the golden scripts share (each runs once, in a throwaway virtualenv with torch, never in CI): random weights
that hide no mapping mistake, the shaping that makes a tiny random Qwen3 language model decode like a trained one
(varied tokens, an end on its own), and a checkpoint folder kept as one .tar.xz whose bytes inside are the
official code's own."""

from __future__ import annotations

import io
import math
import pathlib
import tarfile
from collections.abc import Iterable
from typing import Any


def randomise(model: Any, seed: int, norms: tuple[str, ...] = ("norm",)) -> Any:
    """Every parameter random, none left at a 1 or 0 init that would hide a mapping mistake: matrices scaled by
    1/sqrt(fan-in), norm weights (names holding one of ``norms``) 1 + 0.1 N, the rest 0.1 N. Returns the generator,
    for whatever else the script draws after."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p[0].numel()))
            elif name.endswith("weight") and any(n in name for n in norms):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return g


def shape_qwen3_lm(lm: Any, end_ids: Iterable[int], end_scale: float, norm_scale: float | None) -> None:
    """A random Qwen3 language model (``lm.model`` with layers, embed_tokens and norm; its head tied to the
    embedding) shaped so that greedy decoding varies and ends on its own (a plain random one repeats a few tokens for
    its whole budget): each layer's down_proj x3, the embedding's mean direction removed, the end tokens' rows
    lengthened by ``end_scale``, the final norm by ``norm_scale`` (sharper logits: fewer near-ties)."""
    import torch

    with torch.no_grad():
        for layer in lm.model.layers:
            layer.mlp.down_proj.weight.mul_(3.0)
        emb = lm.model.embed_tokens.weight
        direction = emb.mean(0)
        direction = direction / direction.norm()
        emb.sub_(emb @ direction[:, None] * direction[None, :])
        for i in end_ids:
            emb[i].mul_(end_scale)
        if norm_scale is not None:
            lm.model.norm.weight.mul_(norm_scale)


def pack(folder: pathlib.Path, out: pathlib.Path, top: str) -> None:
    """``folder`` as one .tar.xz under ``top/`` (files sorted, times and owners zeroed: the same bytes each run)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=9) as tar:
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            info = tar.gettarinfo(str(f), arcname=f"{top}/{f.relative_to(folder)}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with f.open("rb") as fh:
                tar.addfile(info, fh)
    out.write_bytes(buf.getvalue())
