"""Live page-fault and page-zeroing activity (Linux): readers of /proc, and the sampler."""
