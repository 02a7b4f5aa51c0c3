"""What Qwen3-ASR and Qwen3-ForcedAligner share: they are one network (the audio encoder, the projector, the Qwen3
decoder) with another head. Its checkpoints, model, tokenizer and numpy decoder, how it is loaded, the features
it reads, and how much audio the aligner takes, which both kinds' folders import (neither imports the other)."""
