"""Local training: the evolutionary loop, its runners, run folders and checkpoints."""
