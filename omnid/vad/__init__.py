"""Silero VAD on MLX: the model, streaming state, batching across sessions, speech timestamps and the file filter."""
