"""Run bookkeeping: where a run lives and what it recorded (identity, results.json, statuses and
exit codes, checkpoints, loggers and their history across attempts). Importing it imports
neither torch nor Lightning; the modules that build Lightning loggers import it when they run."""
