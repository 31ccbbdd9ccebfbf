"""Stage: calibration."""
