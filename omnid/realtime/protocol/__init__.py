"""The realtime wire protocol: client events, server events, and how each dialect (Voxt, OpenAI) speaks them."""
