"""How a Cohere Transcribe engine decodes: the configuration's [cohere_asr] section, which the engine takes as it
is."""

from __future__ import annotations

from omnid.engine.kind import KindSettings
from omnid.engine.languages import language_code

# The languages the official processor takes, and only those (it refuses the others, even those with a token).
LANGUAGES = ("ar", "de", "el", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "vi", "zh")


class CohereOptions(KindSettings):
    # The language a request that names none decodes in (a code or an English name); empty: it must name one.
    language: str = ""
    punctuation: bool = True  # the prompt's <|pnc|> (else <|nopnc|>), where a request does not say
    max_new_tokens: int = 256  # each chunk's budget where a request names none (the model card's)
    # A long clip's chunks decoded at once on the CPU (each step reads the decoder's weights once for all of them);
    # each holds its cross-attention keys and values meanwhile (about 25 MB per 35 s chunk at the real sizes).
    chunks_together: int = 8
    preview_max_new_tokens: int = 64  # a live preview's budget
    stream_unfixed_decodes: int = 2  # live previews: the first decodes of a segment have no forced prefix,
    stream_rollback_tokens: int = 5  # then the previous decode minus its last tokens is forced

    @property
    def default_language(self) -> str | None:
        return language_code(self.language) if self.language.strip() else None

    def check(self) -> None:
        if self.language.strip() and self.default_language not in LANGUAGES:
            raise ValueError(f"cohere_asr.language must be empty or one of {', '.join(LANGUAGES)}, got "
                             f"{self.language[:64]!r}")
        if not 1 <= self.max_new_tokens <= 1014 or not 1 <= self.preview_max_new_tokens <= 1014:
            raise ValueError("cohere_asr.max_new_tokens and preview_max_new_tokens must be in [1, 1014]")
        if not 1 <= self.chunks_together <= 64:
            raise ValueError("cohere_asr.chunks_together must be in [1, 64]")
        if self.stream_unfixed_decodes < 0 or self.stream_rollback_tokens < 0:
            raise ValueError("cohere_asr.stream_unfixed_decodes and stream_rollback_tokens must not be negative")
