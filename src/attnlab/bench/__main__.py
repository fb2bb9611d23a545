"""python -m attnlab.bench: the same as attnlab-bench."""

from attnlab.cli.bench import main

main()
