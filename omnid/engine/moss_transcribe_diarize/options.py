"""How a MOSS-Transcribe-Diarize engine decodes: the configuration's [moss_transcribe_diarize] section."""

from __future__ import annotations

from omnid.engine.kind import KindSettings


class MossOptions(KindSettings):
    # Tokens one decode may write where a request names none; 0: the reference MLX server's budget for the audio,
    # max(512, 10 a second).
    max_new_tokens: int = 0
    # The longest audio one decode takes (the model was trained on up to about 90 minutes); longer audio is decoded
    # as the speech clips the daemon's VAD finds, none longer than this, each with its own speaker numbers.
    max_clip_s: float = 5400.0

    def check(self) -> None:
        if not 0 <= self.max_new_tokens <= 131072:
            raise ValueError("moss_transcribe_diarize.max_new_tokens must be in [0, 131072]")
        if not 30.0 <= self.max_clip_s <= 5400.0:
            raise ValueError("moss_transcribe_diarize.max_clip_s must be in [30, 5400]")
