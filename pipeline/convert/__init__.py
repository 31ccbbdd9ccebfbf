"""Stage: convert."""
