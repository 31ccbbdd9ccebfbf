"""Stage: toy."""
