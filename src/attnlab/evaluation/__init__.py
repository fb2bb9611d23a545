"""Scoring trained checkpoints: loading (and averaging) them, translating and scoring text."""
