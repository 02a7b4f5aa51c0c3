"""Scoring transcripts against references (word error rate) and the corpus evaluation harness behind `omnid eval`."""
