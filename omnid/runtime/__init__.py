"""The engine runtime: one worker thread per model with a priority queue (the scheduler), its errors, and the registry that builds every configured engine."""
