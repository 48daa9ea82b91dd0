"""
Learning experiments: what the algorithms learn (returns against environment steps), each
``python -m benchmarks.learning.<module>``.
"""
