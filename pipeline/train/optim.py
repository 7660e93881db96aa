"""Adam and AdamW over a list of parameters, one ``torch._foreach_*`` kernel per operation for all of them.

The arithmetic is ``torch.optim.Adam`` / ``torch.optim.AdamW`` with ``foreach=True`` (no amsgrad, no maximize),
op for op, so a run is bit for bit what torch's optimiser gives (``tests/unit/train/test_optim.py``). What it leaves
out is torch.optim's wrapping: its first ``step`` (and ``zero_grad``, ``add_param_group``) imports
``torch._dynamo`` to mark itself as not to be compiled, about 1.8 s of every stage process that trains
(docs/benchmark.md), where the training itself is often under a minute.

Adam (Kingma & Ba 2015, Algorithm 1), with step t, gradient g and rate lr_t::

    m_t = beta1 m + (1 - beta1) g            v_t = beta2 v + (1 - beta2) g^2
    theta -= lr_t / (1 - beta1^t) * m_t / (sqrt(v_t) / sqrt(1 - beta2^t) + eps)

Weight decay ``wd``: AdamW (Loshchilov & Hutter 2019) shrinks the weights apart from the adaptive step,
``theta *= 1 - lr_t wd`` first; Adam adds it to the gradient (L2), ``g += wd theta``, so the adaptive step
rescales the decay too (the collapse the ablation stage isolates).
"""

from __future__ import annotations

import torch


class Adam:
    """Adam, or AdamW where ``decoupled``, at the rate ``lr`` (set it between steps to schedule it)."""

    def __init__(
        self,
        parameters,
        lr: float,
        weight_decay: float = 0.0,
        decoupled: bool = False,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.parameters = list(parameters)
        self.lr, self.weight_decay, self.decoupled, self.betas, self.eps = lr, weight_decay, decoupled, betas, eps
        self.state: dict[torch.Tensor, dict] = {}  # per parameter: step count and both moments, made at its first step

    @property
    def name(self) -> str:
        return "AdamW" if self.decoupled else "Adam"

    def zero_grad(self) -> None:
        for p in self.parameters:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient (one that has none is left alone, as torch does)."""
        params = [p for p in self.parameters if p.grad is not None]
        if not params:
            return
        for p in params:
            if p not in self.state:
                zeros = torch.zeros_like(p, memory_format=torch.preserve_format)
                self.state[p] = {"step": 0, "exp_avg": zeros, "exp_avg_sq": zeros.clone()}
        states = [self.state[p] for p in params]
        grads = [p.grad for p in params]
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        for s in states:
            s["step"] += 1
        (beta1, beta2), lr, decay = self.betas, self.lr, self.weight_decay
        if decay != 0:
            if self.decoupled:
                torch._foreach_mul_(params, 1 - lr * decay)
            else:
                grads = torch._foreach_add(grads, params, alpha=decay)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        # the bias corrections in Python floats, as torch computes them (its step count is an exact float)
        step_sizes = [(lr / (1 - beta1 ** float(s["step"]))) * -1 for s in states]
        bias_correction2_sqrt = [(1 - beta2 ** float(s["step"])) ** 0.5 for s in states]
        denominators = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denominators, bias_correction2_sqrt)
        torch._foreach_add_(denominators, self.eps)
        torch._foreach_addcdiv_(params, exp_avgs, denominators, step_sizes)
