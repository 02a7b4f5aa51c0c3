"""NVIDIA Parakeet (FastConformer with TDT, RNN-T or CTC decoding) on MLX."""
