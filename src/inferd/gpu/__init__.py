"""GPUs: discovery (devices.py); without one, nothing here changes an answer."""
