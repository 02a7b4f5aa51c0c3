"""Deterministic synthetic clips for the Sortformer goldens (scripts/sortformer_goldens.py writes them with NeMo,
the tests regenerate the same samples): two "voices" (harmonic tones on different pitches and vowel-like
envelopes) taking turns with digital silence between, a short clip, and full-scale noise. Only numpy, so NeMo's
throwaway environment and the project's tests compute them alike."""

from __future__ import annotations

import numpy as np

RATE = 16000


def _voice(n: int, f0: float, formants: tuple[float, ...], rng: np.random.Generator) -> np.ndarray:
    t = np.arange(n) / RATE
    pitch = f0 * (1 + 0.03 * np.sin(2 * np.pi * 5.0 * t + rng.uniform(0, 6.28)))
    phase = 2 * np.pi * np.cumsum(pitch) / RATE
    out = np.zeros(n)
    for h in range(1, 30):
        freq = h * f0
        if freq > 7000:
            break
        gain = sum(np.exp(-((freq - f) / 120.0) ** 2) for f in formants) + 0.05
        out += gain * np.sin(h * phase) / h
    syllables = 0.55 + 0.45 * np.sin(2 * np.pi * rng.uniform(3.0, 5.0) * t) ** 2
    out *= syllables
    return (0.3 * out / (np.abs(out).max() + 1e-9)).astype(np.float32)


def two_voices(seconds: float, seed: int = 3) -> np.ndarray:
    """Voices A and B alternate (turns of 1.5-4 s), with 0.2-0.8 s of digital silence between turns."""
    rng = np.random.default_rng(seed)
    total = int(seconds * RATE)
    out = np.zeros(total, np.float32)
    voices = [(115.0, (700.0, 1200.0, 2600.0)), (220.0, (400.0, 2100.0, 3000.0))]
    pos, who = int(0.3 * RATE), 0
    while pos < total:
        n = min(int(rng.uniform(1.5, 4.0) * RATE), total - pos)
        f0, formants = voices[who]
        out[pos : pos + n] = _voice(n, f0, formants, rng)
        pos += n + int(rng.uniform(0.2, 0.8) * RATE)
        who = 1 - who
    return out


def noise(seconds: float, seed: int = 5) -> np.ndarray:
    """Full-scale uniform noise in [-1, 1)."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, int(seconds * RATE)).astype(np.float32)


CLIPS = {
    "short": lambda: two_voices(0.4),
    "mid": lambda: two_voices(7.3, seed=11),
    "long": lambda: two_voices(41.8),
    "noise": lambda: noise(3.0),
}
