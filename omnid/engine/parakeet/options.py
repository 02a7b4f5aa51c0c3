"""How a Parakeet engine takes long audio and which head decodes: the configuration's [parakeet] section, which the
engine takes as it is."""

from __future__ import annotations

from typing import Literal

from omnid.engine.kind import KindSettings


class ParakeetOptions(KindSettings):
    max_chunk_s: float = 120.0  # long audio is cut into chunks of at most this long
    split_search_s: float = 2.0  # ... at the quietest 100 ms of this long before each boundary
    max_audio_s: float = 3600.0  # longer audio is refused
    decoder: Literal["transducer", "ctc"] = "transducer"  # a hybrid checkpoint's head

    def check(self) -> None:
        if not (10 <= self.max_chunk_s <= 3600 and 0 < self.split_search_s <= self.max_chunk_s / 4
                and self.max_audio_s > 0):
            raise ValueError("parakeet.max_chunk_s must be in [10, 3600], split_search_s in (0, max_chunk_s / 4] and "
                             "max_audio_s positive")
