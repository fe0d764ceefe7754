"""What the agent samples once a tick: the host, this process, the GPUs (NVML)."""
