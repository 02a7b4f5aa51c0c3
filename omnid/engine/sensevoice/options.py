"""How a SenseVoice engine decodes: the configuration's [sensevoice] section, which the engine takes as it is."""

from __future__ import annotations

from omnid.engine.kind import KindSettings


class SenseVoiceOptions(KindSettings):
    use_itn: bool = False  # inverse text normalisation ("withitn" query) where a request does not say (funasr's)
    ban_emo_unk: bool = False  # never write <|EMO_UNKNOWN|> (funasr's option; off, its default)
    emoji: bool = False  # the text as funasr's rich post-processing writes it, with its emoji (else plain)
    # The longest audio one decode takes: longer audio is cut by the daemon's VAD into speech clips of at most this
    # (as the reference cuts it; funasr's own VAD cuts at 30 s), or, with no speech found, at this length.
    max_clip_s: float = 30.0

    def check(self) -> None:
        if not 1.0 <= self.max_clip_s <= 120.0:
            raise ValueError("sensevoice.max_clip_s must be in [1, 120]")
