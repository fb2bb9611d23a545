"""Special token ids shared by every vocabulary (synthetic, SentencePiece) and the model."""

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
NUM_SPECIAL = 4
