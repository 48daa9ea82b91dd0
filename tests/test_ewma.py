import copy

import numpy as np
import pytest
import torch as th
from torch import nn

from sb3_ewma import (
    center_of_mass_from_ewma_decay,
    ewma_decay_from_center_of_mass,
    ewma_decay_from_span,
    ewma_span_from_decay,
)
from sb3_ewma.common.ewma import EWMAMoments, ParameterEWMA


def make_pair():
    th.manual_seed(0)
    source = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    return source, copy.deepcopy(source)


def flat(module: nn.Module) -> th.Tensor:
    return th.cat([p.detach().flatten() for p in module.parameters()])


@pytest.mark.parametrize("decay", [0.0, 0.5, 8 / 9])
def test_ewma_equals_closed_form_weighted_average(decay):
    source, average = make_pair()
    ewma = ParameterEWMA(source, average, decay)
    history = [flat(source)]
    for _ in range(7):
        with th.no_grad():
            for param in source.parameters():
                param.add_(th.randn_like(param))
        ewma.update()
        history.append(flat(source))
    k = len(history) - 1
    weights = np.array([decay ** (k - i) for i in range(k + 1)])
    expected = sum(w * theta for w, theta in zip(weights, history)) / weights.sum()
    assert th.allclose(flat(ewma.average), expected, atol=1e-5)
    # the weight w is the sum of the weights of the closed form
    assert ewma.weight == pytest.approx(weights.sum())
    assert ewma.n_updates == 7


def test_an_update_made_elsewhere_is_the_update():
    """Moving the averaged parameters by next_fraction (as a compiled training step does), then advance(): the same
    average, weight and count as update(); the first update's fraction is 1 / (1 + beta) by hand."""
    source, average = make_pair()
    ewma, other = ParameterEWMA(source, average, 0.75), ParameterEWMA(source, copy.deepcopy(average), 0.75)
    assert ewma.next_fraction == pytest.approx(1 / 1.75)
    for _ in range(3):
        with th.no_grad():
            for param in source.parameters():
                param.add_(th.randn_like(param))
        ewma.update()
        averaged, followed = other.averaged_pairs
        with th.no_grad():
            for average_param, source_param in zip(averaged, followed, strict=True):
                average_param.lerp_(source_param, other.next_fraction)
        other.advance()
    assert th.equal(flat(ewma.average), flat(other.average))
    assert (ewma.weight, ewma.n_updates) == (other.weight, other.n_updates) == (pytest.approx(1 + 0.75 + 0.75**2 + 0.75**3), 3)


def test_ewma_copies_buffers_gets_no_gradients_and_resets():
    source, average = make_pair()
    ewma = ParameterEWMA(source, average, 0.9)
    assert all(not p.requires_grad for p in ewma.parameters())
    source.train()
    source(th.randn(8, 3))  # moves the batch-norm running statistics
    ewma.update()
    assert th.equal(ewma.average[1].running_mean, source[1].running_mean)
    with th.no_grad():
        source[0].weight.add_(1.0)
    ewma.reset()
    assert th.equal(flat(ewma.average), flat(source)) and ewma.weight == 1.0


def test_ewma_include_filter_leaves_other_parameters():
    source, average = make_pair()
    ewma = ParameterEWMA(source, average, 0.0, include=lambda name: name.startswith("0."))
    before = ewma.average[2].weight.clone()
    with th.no_grad():
        for param in source.parameters():
            param.add_(1.0)
    ewma.update()
    assert th.equal(ewma.average[0].weight, source[0].weight)  # decay 0: copy of the latest
    assert th.equal(ewma.average[2].weight, before)


def test_ewma_follows_to_and_state_dict_round_trip():
    source, average = make_pair()
    ewma = ParameterEWMA(source, average, 0.5)
    source.double()
    ewma.double()
    assert ewma.average[0].weight.dtype == th.float64
    with th.no_grad():
        source[0].weight.add_(2.0)
    ewma.update()  # the cached parameter lists follow the conversion
    # w: 1 -> 1.5; average = theta / 1.5 + (0.5 / 1.5) (theta - 2) = theta - 2 / 3
    assert th.allclose(ewma.average[0].weight, source[0].weight - 2.0 / 3.0)

    other_source, other_average = make_pair()
    restored = ParameterEWMA(other_source.double(), other_average.double(), 0.5)
    restored.load_state_dict(ewma.state_dict())
    assert restored.weight == ewma.weight == 1.5 and restored.n_updates == 1
    assert th.equal(flat(restored.average), flat(ewma.average))


def test_decay_conversions():
    assert ewma_decay_from_center_of_mass(8) == pytest.approx(8 / 9)
    assert center_of_mass_from_ewma_decay(8 / 9) == pytest.approx(8)
    assert center_of_mass_from_ewma_decay(ewma_decay_from_center_of_mass(123.0)) == pytest.approx(123.0)
    assert ewma_span_from_decay(0.0) == 1.0
    assert ewma_decay_from_span(256) == pytest.approx(1 - 2 / 257)
    assert ewma_span_from_decay(ewma_decay_from_span(17.0)) == pytest.approx(17.0)
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            center_of_mass_from_ewma_decay(bad)
    with pytest.raises(ValueError, match="center_of_mass"):
        ewma_decay_from_center_of_mass(-1)


def test_center_of_mass_property_tends_to_formula():
    source, average = make_pair()
    ewma = ParameterEWMA(source, average, 0.8)
    for _ in range(200):
        ewma.update()
    assert ewma.center_of_mass == pytest.approx(center_of_mass_from_ewma_decay(0.8))


def test_ewma_moments_decay_zero_is_latest_batch():
    moments = EWMAMoments(0.0)
    moments.update([1.0, 2.0, 3.0])
    moments.update([10.0, 14.0])
    assert moments.mean == pytest.approx(12.0)
    assert moments.var == pytest.approx(4.0)


def test_ewma_moments_hand_computed():
    d = 0.5
    moments = EWMAMoments(d)
    batch1, batch2 = np.array([0.0, 2.0]), np.array([4.0, 6.0, 8.0])
    moments.update(batch1)
    moments.update(batch2)
    # samples of batch 1 weigh d, those of batch 2 weigh 1
    values = np.concatenate([batch1, batch2])
    weights = np.array([d, d, 1, 1, 1])
    mean = (weights * values).sum() / weights.sum()
    var = (weights * (values - mean) ** 2).sum() / weights.sum()
    assert moments.mean == pytest.approx(mean)
    assert moments.var == pytest.approx(var)
    assert moments.effective_sample_size == pytest.approx(weights.sum() ** 2 / (weights**2).sum())
    normalized = moments.normalize(values)
    assert normalized == pytest.approx((values - mean) / (np.sqrt(var) + 1e-8))


def test_the_extra_state_follows_the_average_to_its_device():
    """SB3 expects every tensor of a state dict on the model's device: the [w, n_updates] tensor moves with the average."""
    source = th.nn.Linear(3, 2)
    ewma = ParameterEWMA(source, th.nn.Linear(3, 2), 0.9)
    ewma.update()
    assert ewma.state_dict()["_extra_state"].device.type == "cpu"
    moved = ewma.to("meta")  # a device other than the CPU, on any machine
    state = moved.state_dict()
    assert {value.device.type for value in state.values()} == {"meta"}
    assert state["_extra_state"].dtype == th.float64
