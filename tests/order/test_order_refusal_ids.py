"""SPEC §18 (1.2.1): a loader's refusals carry the ids the section names, so a caller (or another
implementation's test) can tell a too-long order from bad weights and from a resume of another
order, rather than one generic USAGE."""

from __future__ import annotations

import numpy as np
import pytest

from detfmt.errors import UsageError
from detfmt.order import (
    MixtureOrder,
    MixtureSource,
    OrderSpec,
    RepeatFactorOrder,
    Schedule,
    epoch_permutation,
    mixture_quotas,
    repeat_factor_order,
)


def _rule(call) -> str:
    with pytest.raises(UsageError) as caught:
        call()
    return caught.value.rule


def test_orders_over_2_48_positions_are_order_limit() -> None:
    assert _rule(lambda: epoch_permutation(0, 0, 2**48 + 1)) == "ORDER_LIMIT"  # O-3
    factors = np.full(2, float(2**47 + 1))  # O-10: L = 2^48 + 2
    assert _rule(lambda: repeat_factor_order(factors, 0)) == "ORDER_LIMIT"
    assert _rule(lambda: mixture_quotas([1.0], 2**48 + 1)) == "ORDER_LIMIT"  # O-11


def test_bad_mixture_weights_are_mixture_weights() -> None:
    assert _rule(lambda: mixture_quotas([-1.0, 1.0], 4)) == "MIXTURE_WEIGHTS"
    assert _rule(lambda: mixture_quotas([0.0, 0.0], 4)) == "MIXTURE_WEIGHTS"
    assert _rule(lambda: mixture_quotas([float("nan")], 4)) == "MIXTURE_WEIGHTS"
    sources = [MixtureSource(0), MixtureSource(3)]
    assert _rule(lambda: MixtureOrder(sources, [1.0, 1.0])) == "MIXTURE_WEIGHTS"


def test_resume_of_another_configuration_is_resume_mismatch() -> None:
    state = Schedule(OrderSpec(10), batch_size=2, seed=1).state_dict()
    other_n = Schedule(OrderSpec(11), batch_size=2, seed=1)
    assert _rule(lambda: other_n.load_state_dict(state)) == "RESUME_MISMATCH"
    factors = np.ones(10)
    repeat = Schedule(RepeatFactorOrder(factors, 0.5), batch_size=2, seed=1)
    saved = repeat.state_dict()
    changed = Schedule(RepeatFactorOrder(factors, 0.25), batch_size=2, seed=1)
    assert _rule(lambda: changed.load_state_dict(saved)) == "RESUME_MISMATCH"
