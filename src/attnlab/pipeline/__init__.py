"""The run orchestrator: one composed config in, one run directory out.

attnlab.pipeline.build composes the objects of a run (data, module, loggers, trainer) from the
config; attnlab.pipeline.train sequences a run (resume or start, fit, test, record). It sits above
attnlab.config (which validates the config), attnlab.training (the LightningModule and its
callbacks) and attnlab.runs (the run directory); attnlab.cli.train calls it once per job.
"""
