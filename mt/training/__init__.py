"""Training: the trainer and its update step, the schedule and budget, checkpoints of a run
and exact resume, health checks, validation, metrics and fine-tuning."""
