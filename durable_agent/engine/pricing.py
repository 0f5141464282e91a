"""What a prompt cost: Anthropic's published per-model prices (USD per million tokens) applied
to the usage of each model that answered (`QueryResult.usage_by_model`).

Cache writes are priced at the 5-minute rate (the only TTL the loop asks for). A model the
table does not know is priced as Sonnet and said so (`Price.known`): the cost is an estimate
then, not a silent zero."""

from __future__ import annotations

from dataclasses import dataclass

from durable_agent.engine.messages import Usage

MILLION = 1_000_000
WEB_SEARCH_USD = 0.01
"""One web search the API ran ($10 per 1,000, whatever the model)."""


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cache_write: float
    cache_read: float
    known: bool = True

    def cost(self, usage: Usage) -> float:
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_creation_input_tokens * self.cache_write
            + usage.cache_read_input_tokens * self.cache_read
        ) / MILLION + usage.server_tool_use.web_search_requests * WEB_SEARCH_USD


SONNET = Price(3.0, 15.0, 3.75, 0.30)
PRICES: tuple[tuple[str, Price], ...] = (
    # most specific first: a model id is priced by the first name it contains
    ("opus-4-5", Price(5.0, 25.0, 6.25, 0.50)),
    ("opus-4-6", Price(5.0, 25.0, 6.25, 0.50)),
    ("opus", Price(15.0, 75.0, 18.75, 1.50)),
    ("sonnet", SONNET),
    ("haiku-4", Price(1.0, 5.0, 1.25, 0.10)),
    ("3-5-haiku", Price(0.80, 4.0, 1.0, 0.08)),
    ("haiku", Price(0.25, 1.25, 0.30, 0.03)),
)


def price_of(model: str) -> Price:
    name = model.lower()
    for fragment, price in PRICES:
        if fragment in name:
            return price
    return Price(SONNET.input, SONNET.output, SONNET.cache_write, SONNET.cache_read, known=False)


def cost_usd(usage_by_model: dict[str, Usage]) -> float:
    return sum(price_of(model).cost(usage) for model, usage in usage_by_model.items())
