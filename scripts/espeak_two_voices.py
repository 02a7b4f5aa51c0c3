"""Writes tests/goldens/sortformer_tiny/two_voices_espeak.flac: two espeak-ng voices taking turns (a low male
American voice and a high female British one), 16 kHz mono PCM16, 0.5 s of silence between turns. Run once with
espeak-ng installed (Debian: apt-get install espeak-ng); the tests read the committed file, never espeak-ng."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import omnid  # noqa: E402,F401  (OpenBLAS before MLX)
from omnid.audio import decode_audio, pcm16  # noqa: E402

OUT = ROOT / "tests" / "goldens" / "sortformer_tiny" / "two_voices_espeak.flac"
TURNS = [
    ("en-us", 40, "Good morning. Shall we begin with the budget for the next quarter?"),
    ("en-gb+f3", 75, "Yes. The numbers came in yesterday and they look better than expected."),
    ("en-us", 40, "That is good news. What about the hiring plan?"),
    ("en-gb+f3", 75, "We can open two positions in March, if the board agrees."),
]


def flac_bytes(audio: np.ndarray) -> bytes:
    """16 kHz mono PCM16 as FLAC (lossless: the same samples as the WAV it once was, in half the bytes)."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="flac") as out:
        stream = out.add_stream("flac", rate=16000, layout="mono")
        frame = av.AudioFrame.from_ndarray(np.frombuffer(pcm16(audio), "<i2")[None, :], format="s16", layout="mono")
        frame.sample_rate = 16000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return buf.getvalue()


def main() -> None:
    parts = []
    for voice, pitch, text in TURNS:
        wav = subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "-s", "150", "--stdout", text],
                             capture_output=True, check=True).stdout
        parts += [decode_audio(wav), np.zeros(8000, np.float32)]
    audio = np.concatenate(parts)
    OUT.write_bytes(flac_bytes(audio))
    print(f"wrote {OUT}: {len(audio) / 16000:.1f} s")


if __name__ == "__main__":
    main()
