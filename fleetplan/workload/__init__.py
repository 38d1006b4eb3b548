"""Real inputs: workloads fitted from request traces and efficiency priors calibrated from measured latency profiles."""
