"""The engine runtime: one worker thread per model with a priority queue (the scheduler), and the registry that
builds every configured engine."""
