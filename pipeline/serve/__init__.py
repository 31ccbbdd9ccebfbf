"""Stage: serve."""
