"""attnlab-train's exit code for each final status of a run; attnlab-sweep reads them back
(results.json's `status`, when present, is the authority). Kept free of heavy imports."""

EXIT_CODES = {"completed": 0, "failed": 1, "config_error": 2, "diverged": 3, "interrupted": 4}
