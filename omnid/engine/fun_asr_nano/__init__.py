"""Fun-ASR-Nano (FunASR): the SenseVoice audio encoder, FunASR's adaptor and a Qwen3 language model writing the text."""
