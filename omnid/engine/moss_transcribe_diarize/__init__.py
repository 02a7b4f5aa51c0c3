"""MOSS-Transcribe-Diarize: who said what and when, from one model (engine/kind.py descriptor in kind.py)."""
