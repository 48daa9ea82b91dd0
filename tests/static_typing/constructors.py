# mypy: warn-unused-ignores
"""
What a type checker makes of the constructors' keyword arguments (PEP 692 ``**kwargs: Unpack[...]``): checked by
``mypy`` in ``.ci/run``, never run. A call that must be an error carries ``# type: ignore[code]``: with
``warn-unused-ignores``, mypy fails if it does not find that error there.
"""

from sb3_ewma import PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA

# the parents' hyperparameters and the decoupled options, with their types
PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, clip_range=None, ewma_decay=0.9, kl_coef=0.1)
RecurrentPPO_EWMA("MlpLstmPolicy", "CartPole-v1", batch_size=None, use_sde=False, ewma_decay="paper")
MaskablePPO_EWMA("MlpPolicy", "CartPole-v1", rollout_buffer_kwargs={}, async_rollouts="thread")
PPG_EWMA("MlpPolicy", "CartPole-v1", n_aux_epochs=2, ewma_decay=0.99, distributed=False)

# a misspelt keyword, one of another parent, a wrong type (a hyperparameter given by position: tests/test_arguments.py,
# since mypy reports it with different codes depending on its cache)
PPO_EWMA("MlpPolicy", "CartPole-v1", n_stepz=64)  # type: ignore[call-arg]
MaskablePPO_EWMA("MlpPolicy", "CartPole-v1", use_sde=True)  # type: ignore[call-arg]
RecurrentPPO_EWMA("MlpLstmPolicy", "CartPole-v1", rollout_buffer_class=None)  # type: ignore[call-arg]
PPG_EWMA("MlpPolicy", "CartPole-v1", kl_coeff=0.1)  # type: ignore[call-arg]
PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps="64")  # type: ignore[arg-type]
PPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=[0.9])  # type: ignore[arg-type]
