"""A realtime session: audio in, VAD-gated segments, live previews and finals out; its wire protocol in protocol/."""
