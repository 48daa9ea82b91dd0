"""
Rollout collection:

- :mod:`~sb3_ewma.common.collection.rollout`: the parents' rollout loops, with an explicit behavior policy;
- :mod:`~sb3_ewma.common.collection.thread`: the collector of overlapped rollouts on a thread;
- :mod:`~sb3_ewma.common.collection.process`: the collector in a forked process;
- :mod:`~sb3_ewma.common.collection.overlap`: ``async_rollouts``, the ``learn`` loop that overlaps collection with
  training.
"""
