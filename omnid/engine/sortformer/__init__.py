"""Streaming Sortformer speaker diarization (NVIDIA NeMo v2/v2.1) on MLX."""
