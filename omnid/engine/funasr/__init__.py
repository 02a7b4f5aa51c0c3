"""What Alibaba FunASR's models (SenseVoice, Fun-ASR-Nano) share: the Kaldi-style filterbank front end with its frame
stacking and normalisation."""
