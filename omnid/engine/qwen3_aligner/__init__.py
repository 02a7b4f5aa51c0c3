"""Qwen3-ForcedAligner on MLX: word and character times for Qwen3-ASR transcripts."""
