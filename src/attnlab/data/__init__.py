"""Data: tokenizers, synthetic tasks, text datasets, batching and LightningDataModules."""
