"""dp-sgd's per-sample step probed before a run: a model vmap(grad) fails on (nn.GRU) is one ConfigError on privacy.mechanism."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from chillfl.errors import ConfigError
from chillfl.privacy.dpsgd import check_per_sample


class Recurrent(nn.Module):
    def __init__(self, cell: type[nn.RNNBase]) -> None:
        super().__init__()
        self.emb, self.rnn, self.fc = nn.Embedding(20, 8), cell(8, 16, batch_first=True), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.rnn(self.emb(x.long()))[0][:, -1])


def rows() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, 20, (2, 5), generator=torch.Generator().manual_seed(0)).float(), torch.tensor([0, 1])


def test_a_gru_is_refused_on_privacy_mechanism_naming_the_layer() -> None:
    # it failed in the first training step, mid-run: "output with shape [1, 16] doesn't match the broadcast shape [16, 1, 16]"
    with pytest.raises(ConfigError) as err:
        check_per_sample(Recurrent(nn.GRU), *rows())
    assert err.value.field == "privacy.mechanism"
    assert "GRU 'rnn'" in err.value.message and "dp-fedavg" in err.value.message and "\n" not in err.value.message


@pytest.mark.filterwarnings("ignore:There is a performance drop")
def test_models_that_run_per_sample_pass() -> None:
    check_per_sample(Recurrent(nn.LSTM), *rows())
    check_per_sample(nn.Sequential(nn.Linear(5, 4)), *rows())
