"""Cohere Transcribe (cohere-transcribe-03-2026): the shared FastConformer, a Transformer decoder, the official prompt."""
