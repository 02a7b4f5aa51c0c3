"""How a Cohere Transcribe engine decodes: the configuration's [cohere_asr] section, which the engine takes as it
is."""

from __future__ import annotations

from omnid.engine.kind import KindSettings


class CohereOptions(KindSettings):
    punctuation: bool = True  # the prompt's <|pnc|> (else <|nopnc|>), where a request does not say
    max_new_tokens: int = 256  # each chunk's budget where a request names none (the model card's)
    preview_max_new_tokens: int = 64  # a live preview's budget
    stream_unfixed_decodes: int = 2  # live previews: the first decodes of a segment have no forced prefix,
    stream_rollback_tokens: int = 5  # then the previous decode minus its last tokens is forced

    def check(self) -> None:
        if not 1 <= self.max_new_tokens <= 1014 or not 1 <= self.preview_max_new_tokens <= 1014:
            raise ValueError("cohere_asr.max_new_tokens and preview_max_new_tokens must be in [1, 1014]")
        if self.stream_unfixed_decodes < 0 or self.stream_rollback_tokens < 0:
            raise ValueError("cohere_asr.stream_unfixed_decodes and stream_rollback_tokens must not be negative")
