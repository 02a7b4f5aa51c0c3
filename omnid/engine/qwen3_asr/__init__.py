"""Qwen3-ASR (0.6B, 1.7B) on MLX."""
