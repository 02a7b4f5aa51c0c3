"""Writes tests/goldens/sortformer_tiny/two_voices_espeak.wav: two espeak-ng voices taking turns (a low male
American voice and a high female British one), 16 kHz mono PCM16, 0.5 s of silence between turns. Run once with
espeak-ng installed (Debian: apt-get install espeak-ng); the tests read the committed file, never espeak-ng."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import omnid  # noqa: E402,F401  (OpenBLAS before MLX)
from omnid.audio import decode_audio, wav_bytes  # noqa: E402

OUT = ROOT / "tests" / "goldens" / "sortformer_tiny" / "two_voices_espeak.wav"
TURNS = [
    ("en-us", 40, "Good morning. Shall we begin with the budget for the next quarter?"),
    ("en-gb+f3", 75, "Yes. The numbers came in yesterday and they look better than expected."),
    ("en-us", 40, "That is good news. What about the hiring plan?"),
    ("en-gb+f3", 75, "We can open two positions in March, if the board agrees."),
]


def main() -> None:
    parts = []
    for voice, pitch, text in TURNS:
        wav = subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "-s", "150", "--stdout", text],
                             capture_output=True, check=True).stdout
        parts += [decode_audio(wav), np.zeros(8000, np.float32)]
    audio = np.concatenate(parts)
    OUT.write_bytes(wav_bytes(audio))
    print(f"wrote {OUT}: {len(audio) / 16000:.1f} s")


if __name__ == "__main__":
    main()
