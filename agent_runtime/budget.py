"""Token budgets: cumulative across attempts, checked before every model request
and every pending tool call.

Consumed tokens are the provider's reported `totalTokens`, else
`inputTokens + outputTokens`. A budgeted run whose provider reports neither
fails the step: silently counting zero would let the budget be overspent.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from agent_runtime.errors import StepFailed, SuspendRun
from agent_runtime.models.base import Usage


@dataclass
class TokenBudget:
    max_total_tokens: int | None
    consumed_tokens: int = 0
    # Tokens by the step path that consumed them, in this execution; and whether
    # steps spend side by side now (a parallel wave), so a step's own share of
    # the total is not the difference of two readings of it.
    by_step: Counter[str] = field(default_factory=Counter)
    concurrent: bool = False

    def spent(self, step_path: str) -> int:
        """A reading to subtract from a later one: the tokens a step spent between."""
        return self.by_step[step_path] if self.concurrent else self.consumed_tokens

    @property
    def exhausted(self) -> bool:
        return self.max_total_tokens is not None and self.consumed_tokens >= self.max_total_tokens

    @property
    def overshoot_tokens(self) -> int:
        """Tokens consumed beyond the limit: what requests already in flight took
        once it was reached (one request in a sequential run; a parallel wave's
        members in flight together)."""
        if self.max_total_tokens is None:
            return 0
        return max(0, self.consumed_tokens - self.max_total_tokens)

    def check(self, *, before: str) -> None:
        """Suspend the run (`token-budget`) when nothing is left; `before` says what waits."""
        if self.exhausted:
            raise SuspendRun("token-budget", {
                "max_total_tokens": self.max_total_tokens,
                "consumed_tokens": self.consumed_tokens,
                "before": before,
            })

    def consume(self, usage: Usage | None, *, step_path: str) -> int:
        tokens = None if usage is None else usage.tokens()
        if tokens is None:
            if self.max_total_tokens is not None:
                raise StepFailed(
                    "usage_missing",
                    f"step {step_path}: the model reported no token usage, but the run has a "
                    "token budget; use a provider that reports usage or run without a budget",
                )
            return 0
        self.consumed_tokens += tokens
        self.by_step[step_path] += tokens
        return tokens
