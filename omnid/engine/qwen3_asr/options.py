"""How a Qwen3-ASR engine decodes: the configuration's [qwen3_asr] section, which the engine takes as it is."""

from __future__ import annotations

from omnid.engine.kind import KindSettings


class QwenOptions(KindSettings):
    max_chunk_s: float = 1200.0  # longer audio is split at a quiet point near each multiple of this
    split_search_s: float = 5.0
    min_new_tokens: int = 128  # every chunk's own token budget: max(min_new_tokens, tokens_per_second x seconds)
    tokens_per_second: float = 10.0
    loop_window: int = 24  # a decode stops when its last loop_window tokens hold at most loop_max_distinct ones (0: never)
    loop_max_distinct: int = 3
    stream_unfixed_decodes: int = 2  # live previews: the first decodes of a segment have no forced prefix,
    stream_rollback_tokens: int = 5  # then the previous decode minus its last tokens is forced
    preview_max_new_tokens: int = 32
    # Its forced aligner's (engine/qwen3_aligner): a timed transcript's segments end at the word passing this.
    timed_segment_max_s: float = 10.0

    def check(self) -> None:
        if not 30 <= self.max_chunk_s <= 3600 or not 0 <= self.split_search_s <= self.max_chunk_s / 4:
            raise ValueError("qwen3_asr.max_chunk_s must be in [30, 3600] and split_search_s in [0, max_chunk_s / 4]")
        if not 1 <= self.min_new_tokens <= 4096 or not 0 < self.tokens_per_second <= 100 \
                or not 1 <= self.preview_max_new_tokens <= 4096:
            raise ValueError("qwen3_asr: min_new_tokens and preview_max_new_tokens must be in [1, 4096], "
                             "tokens_per_second in (0, 100]")
        if self.loop_window < 0 or not 1 <= self.loop_max_distinct < max(2, self.loop_window):
            raise ValueError("qwen3_asr.loop_window must be >= 0 (0: off) and loop_max_distinct in [1, loop_window)")
        if self.stream_unfixed_decodes < 0 or self.stream_rollback_tokens < 0:
            raise ValueError("qwen3_asr.stream_unfixed_decodes and stream_rollback_tokens must not be negative")
        if not 1.0 <= self.timed_segment_max_s <= 60.0:
            raise ValueError("qwen3_asr.timed_segment_max_s must be in [1, 60]")
