"""Comparing runs (attnlab-compare): reading results.json files, grouping runs by the config keys
that differ, aggregating seeds, and the tables and plots of the report."""
