"""
Rollout collection:

- :mod:`~sb3_ewma.common.collection.rollout`: SB3's rollout loop with an explicit behavior policy and step count;
- :mod:`~sb3_ewma.common.collection.thread`: the collector of overlapped rollouts on a thread;
- :mod:`~sb3_ewma.common.collection.process`: the collector in a forked process;
- :mod:`~sb3_ewma.common.collection.overlap`: ``async_rollouts``, the ``learn`` loop that overlaps collection with
  training.
"""
