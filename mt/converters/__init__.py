"""Converters: a trained model written in another toolkit's format (`mt export`)."""
