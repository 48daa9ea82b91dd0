"""
Timing probes: what the algorithms and their parts cost (seconds, steps per second), each
``python -m benchmarks.timing.<module>``.
"""
