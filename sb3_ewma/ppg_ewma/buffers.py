"""The auxiliary-phase buffer of PPG / PPG-EWMA, kept in host memory with the observations in their own dtype."""

from collections.abc import Iterator, Sequence

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.preprocessing import get_obs_shape
from stable_baselines3.common.type_aliases import PyTorchObs

from sb3_ewma.common.minibatches import shuffled_rollout_indices


class AuxiliaryBuffer:
    """
    The data of one PPG policy phase for its auxiliary phase: the observations and value targets (the rollout buffer's
    returns) of ``n_iterations`` rollouts, and the outputs of ``pi_old`` on them, computed once before the phase.
    Preallocated numpy arrays in host memory, observations in the space's dtype; only requested rows go to the device.

    :param n_iterations: rollouts per policy phase (``N_pi``)
    :param n_steps: steps per environment per rollout
    :param n_envs: number of environments
    :param observation_space: the observation space (``Dict`` allowed)
    :param device: where sampled rows are sent
    """

    def __init__(
        self,
        n_iterations: int,
        n_steps: int,
        n_envs: int,
        observation_space: spaces.Space,
        device: th.device | str = "cpu",
    ) -> None:
        self.iteration_size = n_steps * n_envs
        self.capacity = n_iterations * self.iteration_size
        self.device = th.device(device)
        self.observation_space = observation_space
        if isinstance(observation_space, spaces.Dict):
            subspaces: dict[str | None, spaces.Space] = dict(observation_space.spaces.items())
        else:
            subspaces = {None: observation_space}
        self._observations: dict[str | None, np.ndarray] = {}
        for key, space in subspaces.items():
            shape = get_obs_shape(space)
            assert isinstance(shape, tuple), "a subspace of a Dict space is not a Dict (SB3's buffers take none)"
            self._observations[key] = np.zeros((self.capacity, *shape), dtype=space.dtype)
        self._value_targets = np.zeros(self.capacity, dtype=np.float32)
        # pi_old's distribution parameters, one (capacity, n) float32 array each, allocated at the first use
        self._old_policy: list[np.ndarray] = []
        self.size = 0

    @property
    def observation_dtypes(self) -> dict[str | None, np.dtype]:
        """The dtype in which each observation array is stored (key ``None`` for non-``Dict`` spaces)."""
        return {key: storage.dtype for key, storage in self._observations.items()}

    @property
    def full(self) -> bool:
        return self.size == self.capacity

    @property
    def bytes_per_step(self) -> int:
        """Host memory per stored step: observations in their dtype, the value target and (once computed) ``pi_old``."""
        arrays = [*self._observations.values(), self._value_targets, *self._old_policy]
        return sum(array.itemsize * int(np.prod(array.shape[1:])) for array in arrays)

    @property
    def nbytes(self) -> int:
        """Host memory of the preallocated arrays, in bytes."""
        return self.capacity * self.bytes_per_step

    def reset(self) -> None:
        """Empty the buffer (the arrays are kept and overwritten)."""
        self.size = 0

    def add(self, rollout_buffer: RolloutBuffer) -> None:
        """Append the observations and value targets (returns) of one full rollout buffer."""
        n = rollout_buffer.buffer_size * rollout_buffer.n_envs
        if n != self.iteration_size:
            raise ValueError(f"expected a rollout of {self.iteration_size} steps, got {n}")
        if self.size + n > self.capacity:
            raise RuntimeError(f"auxiliary buffer full ({self.capacity} steps)")
        rows = slice(self.size, self.size + n)
        # stored environment-major, as SB3 flattens a sampled buffer: the rollout buffer's arrays are
        # (n_steps, n_envs, ...) or, once sampled, already flattened that way
        flattened = rollout_buffer.generator_ready

        def env_major(array: np.ndarray, row_shape: tuple[int, ...]) -> np.ndarray:
            array = np.asarray(array)
            return array.reshape(n, *row_shape) if flattened else array.swapaxes(0, 1).reshape(n, *row_shape)

        observations = rollout_buffer.observations
        for key, storage in self._observations.items():
            source = observations if key is None else observations[key]
            storage[rows] = env_major(source, storage.shape[1:])
        self._value_targets[rows] = env_major(rollout_buffer.returns, ())
        self.size += n

    def minibatch_indices(self, batch_size: int, rollout_length: int | None = None) -> Iterator[np.ndarray]:
        """
        One epoch in minibatches of ``batch_size`` rows: random rows, or with ``rollout_length`` (``n_steps``) whole
        rollouts of one environment in random order.
        """
        if rollout_length is not None:
            yield from shuffled_rollout_indices(self.size // rollout_length, rollout_length, batch_size)
            return
        indices = np.random.permutation(self.size)
        for start in range(0, self.size, batch_size):
            yield indices[start : start + batch_size]

    def sequential_indices(self, batch_size: int) -> Iterator[np.ndarray]:
        """The stored rows in order, in batches of ``batch_size`` (the last may be smaller)."""
        for start in range(0, self.size, batch_size):
            yield np.arange(start, min(start + batch_size, self.size))

    def observations(self, indices: np.ndarray) -> PyTorchObs:
        """The observations of the given rows on the device, in their stored dtype (a dict for ``Dict`` spaces)."""
        if None in self._observations:
            return th.as_tensor(self._observations[None][indices], device=self.device)
        return {
            key: th.as_tensor(storage[indices], device=self.device)
            for key, storage in self._observations.items()
            if key is not None
        }

    def value_targets(self, indices: np.ndarray) -> th.Tensor:
        return th.as_tensor(self._value_targets[indices], device=self.device)

    def store_old_policy(self, indices: np.ndarray, parameters: Sequence[th.Tensor]) -> None:
        """Store ``pi_old``'s distribution parameters for the given rows."""
        if not self._old_policy:
            self._old_policy = [np.zeros((self.capacity, *p.shape[1:]), dtype=np.float32) for p in parameters]
        for storage, parameter in zip(self._old_policy, parameters):
            storage[indices] = parameter.detach().cpu().numpy()

    def old_policy(self, indices: np.ndarray) -> list[th.Tensor]:
        """``pi_old``'s distribution parameters for the given rows, on the device."""
        return [th.as_tensor(storage[indices], device=self.device) for storage in self._old_policy]
