"""Stage: bench."""
