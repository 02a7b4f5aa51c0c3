"""Whisper on MLX: the model, its log-mel front end, checkpoints, tokenizer, decoding, word alignment and the engine."""
