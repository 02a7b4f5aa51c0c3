"""What NVIDIA NeMo's models share: the .nemo archive, the log-mel front end, the FastConformer encoder."""
