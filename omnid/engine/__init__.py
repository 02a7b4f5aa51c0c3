"""Model engines, one folder per kind (whisper/; qwen3_asr/ next), and what they share: language names, checkpoint pins, load errors."""
