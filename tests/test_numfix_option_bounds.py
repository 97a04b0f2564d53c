"""DS-FL's ERA temperature, SCARLET's beta and NTD's tau are bounded like temperatures (report-numeric #6).

Only ``> 0`` was checked, and at legal extremes the maths overflowed to nan: softmax(p / 1e-320) (p / T = inf),
p**1e308 renormalised (beta * log p = -inf for every class when max p < 0.17), the not-true softmax at tau = 1e-39 in
float32 (z / tau = inf). Each run then ended "diverged", blaming the model or the lr. Now each is refused in one line
naming its field, and the bounds themselves compute finite values.
"""

from __future__ import annotations

import pytest
import torch

from chillfl.distillation.era import power_sharpen, tempered_softmax
from chillfl.distillation.methods.dsfl import DSFLOptions
from chillfl.distillation.methods.scarlet import SCARLETOptions
from chillfl.errors import ConfigError
from chillfl.training.term_kinds.ntd import NtdOptions, ntd_loss


@pytest.mark.parametrize("options, field", [
    (DSFLOptions(temperature=1e-320), "distillation.temperature"),
    (DSFLOptions(temperature=1e-5), "distillation.temperature"),
    (DSFLOptions(temperature=1e5), "distillation.temperature"),
    (SCARLETOptions(beta=1e308), "distillation.beta"),
    (SCARLETOptions(beta=2e4), "distillation.beta"),
    (NtdOptions(tau=1e-39), "objective.ntd.tau"),
    (NtdOptions(tau=5e-5), "objective.ntd.tau"),
])
def test_extreme_values_are_refused_naming_the_field(options: object, field: str) -> None:
    section = field.rsplit(".", 1)[0]
    with pytest.raises(ConfigError) as caught:
        options.validate(section)  # type: ignore[attr-defined]
    assert caught.value.field == field and "\n" not in str(caught.value)


def test_the_functions_refuse_what_gave_nan() -> None:
    probs = torch.full((2, 10), 0.1)
    with pytest.raises(ConfigError):
        tempered_softmax(probs, 1e-320)
    with pytest.raises(ConfigError):
        power_sharpen(probs, 1e308)


def test_the_bounds_are_finite_and_one_hot_where_the_limit_is() -> None:
    probs = torch.tensor([[0.16, 0.15] + [0.69 / 8] * 8])  # max p < 0.17
    for out in (tempered_softmax(probs, 1e-4), power_sharpen(probs, 1e4)):
        torch.testing.assert_close(out, torch.tensor([[1.0] + [0.0] * 9]), rtol=0.0, atol=1e-40)  # e^-100 at T = 1e-4
    assert torch.isfinite(tempered_softmax(probs, 1e4)).all()
    DSFLOptions(temperature=1e-4).validate("distillation")
    SCARLETOptions(beta=1e4).validate("distillation")
    NtdOptions(tau=1e-4).validate("objective.ntd")
    z_l = torch.tensor([[3.0, 1.0, -2.0, 0.5]])
    z_g = torch.tensor([[2.0, 0.25, 1.0, -1.0]])
    loss = ntd_loss(z_l, z_g, torch.tensor([0]), 1e-4)  # float32: z / tau = 3e4, finite
    # not-true classes 1..3: q_g is one-hot on class 2 (z_g 1.0), q_l puts mass e^{(-2 - 1) / 1e-4} on it, so
    # KL = (1 - (-2)) / 1e-4 = 3e4 and tau^2 KL = 3e-4
    assert loss.item() == pytest.approx(3e-4, rel=1e-5)
