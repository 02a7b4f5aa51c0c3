"""NVIDIA NeMo's FastConformer encoder and log-mel front end, shared by the NeMo kinds."""
