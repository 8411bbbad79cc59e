"""First-party plugin: Independent Proximal Policy Optimization (IPPO) for PettingZoo teams."""
