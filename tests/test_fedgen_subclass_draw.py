"""A FedGen subclass whose own draw_generator sets ``self.generator`` and ``self.params`` (a wider generator) ran before
the drawing was made lazy (7502c7e2) and then raised AttributeError in round 1: ``generator`` had no setter (rev103b)."""

from __future__ import annotations

import torch

from chillfl.aggregation.fedgen import FedGen, FedGenOptions, FeatureGenerator
from chillfl.seeds import derive_seed


class Wider(FedGen):
    def draw_generator(self, seed: int) -> None:
        torch.manual_seed(derive_seed(seed, "wider"))
        self.generator = FeatureGenerator(self.num_classes, self.options.noise_dim, 2 * self.options.hidden, self.feature_dim)
        self.params = {k: v.detach().clone() for k, v in self.generator.named_parameters()}


def test_a_subclass_that_draws_its_own_generator_is_drawn_once_and_kept() -> None:
    g = Wider(FedGenOptions(noise_dim=3, hidden=8, samples=4, generator_steps=2, generator_batch=4), "head", 2, 5)
    widths = {k: tuple(v.shape) for k, v in g.params.items()}
    assert any(16 in shape for shape in widths.values()), widths  # the subclass's 2 * hidden, not FedGen's own
    assert g.generator is g.generator and g.params is g.params  # drawn once
    replaced = {k: torch.zeros_like(v) for k, v in g.params.items()}
    g.params = replaced  # a loaded checkpoint's weights stay
    assert g.params is replaced


class ParamsFirst(FedGen):
    def draw_generator(self, seed: int) -> None:
        module = FeatureGenerator(self.num_classes, self.options.noise_dim, self.options.hidden, self.feature_dim)
        self.params = {k: v.detach().clone() for k, v in module.named_parameters()}  # the weights before the module
        self.generator = module


def test_a_subclass_setting_the_weights_first_draws_once() -> None:
    """params' setter drew the module, which called the subclass's draw_generator, which set params: RecursionError (rev103d)."""
    g = ParamsFirst(FedGenOptions(noise_dim=3, hidden=8, samples=4, generator_steps=2, generator_batch=4), "head", 2, 5)
    assert g.generator is g.generator and set(g.params) == {k for k, _ in g.generator.named_parameters()}


def test_weights_set_before_the_first_draw_are_kept() -> None:
    g = FedGen(FedGenOptions(noise_dim=3, hidden=8, samples=4, generator_steps=2, generator_batch=4), "head", 2, 5)
    loaded = {k: torch.zeros_like(v) for k, v in FedGen(g.options, "head", 2, 5).params.items()}
    g.params = loaded  # a checkpoint's, before anything drew the module
    assert g.generator is not None and g.params is loaded
