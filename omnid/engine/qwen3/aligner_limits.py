"""How much audio Qwen3-ForcedAligner takes at a time: what the aligner refuses beyond, and what a Qwen3-ASR
transcript it will time is cut to (as the official timed transcription cuts it)."""

from __future__ import annotations

MAX_SECONDS = 180.0  # the official MAX_FORCE_ALIGN_INPUT_SECONDS: the length timed transcription cuts at
SPLIT_SEARCH_S = 5.0  # the official cut's search for a quiet point around each multiple of it
LIMIT_S = MAX_SECONDS + SPLIT_SEARCH_S  # the longest chunk such a cut gives
