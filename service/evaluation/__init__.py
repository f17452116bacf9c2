"""Evaluation: answer metrics (pure functions) and the runner that drives a strategy over questions."""
