"""How a Fun-ASR-Nano engine decodes: the configuration's [fun_asr_nano] section, which the engine takes as it is."""

from __future__ import annotations

from omnid.engine.kind import KindSettings


class FunAsrNanoOptions(KindSettings):
    use_itn: bool = True  # inverse text normalisation where a request does not say (the reference server's default)
    max_new_tokens: int = 512  # each clip's budget where a request names none (funasr's max_length)
    # The longest audio one decode takes (the reference serves at most 30 s): longer audio is decoded as the speech
    # clips the daemon's VAD finds, none longer than this, as for SenseVoice.
    max_clip_s: float = 30.0

    def check(self) -> None:
        if not 1 <= self.max_new_tokens <= 4096:
            raise ValueError("fun_asr_nano.max_new_tokens must be in [1, 4096]")
        if not 1.0 <= self.max_clip_s <= 60.0:
            raise ValueError("fun_asr_nano.max_clip_s must be in [1, 60]")
