"""First-party plugin: Gymnasium environments for single-agent algorithms."""
