"""Where users and sites are: the metro latency graph (round trips) and demand per metro ×
workload × slice."""
