"""Training: LightningModules, losses, schedules, metrics and callbacks."""
