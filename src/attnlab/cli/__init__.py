"""The commands, one small module each: attnlab-train, attnlab-eval, attnlab-sweep,
attnlab-compare, attnlab-attention, attnlab-bench. Each imports what it needs when it needs it."""
