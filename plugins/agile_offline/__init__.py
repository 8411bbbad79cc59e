"""First-party plugin: offline RL environments (a Gymnasium env plus a fixed dataset)."""
