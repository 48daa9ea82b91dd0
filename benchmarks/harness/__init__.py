"""
The benchmarks' shared machinery: run specifications, CSV files and the finished runs (:mod:`~benchmarks.harness.common`),
the file that gathers an experiment's runs (:mod:`~benchmarks.harness.results_store`), the environments and networks
(:mod:`~benchmarks.harness.envs`), the paper's settings and presets (:mod:`~benchmarks.harness.settings`), one run
(:mod:`~benchmarks.harness.runner`), the parallel scheduler and command line of a learning experiment
(:mod:`~benchmarks.harness.cli`) and its report (:mod:`~benchmarks.harness.report`).
"""
