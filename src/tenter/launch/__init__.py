"""Launching jobs: spec -> plan (pure) -> a backend that executes that same plan."""
