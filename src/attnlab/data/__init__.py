"""Data: tokenizers, synthetic tasks, text datasets, batching and LightningDataModules.

configs.py declares each DataModule's options (no torch); resumable.py is their base class (a
resumed run continues mid-epoch); synthetic.py, translation.py and language_model.py are the
modules; text.py what the text modules share.
"""
