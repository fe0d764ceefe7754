"""The fleet page's settings: Django settings first, then the environment.

PERFWEB_GPU_PRICES  price per GPU-hour by GPU model, `H100=2.49,A100=1.29` (a model matches
                    when its name contains the key, case-insensitively; the longest key wins);
                    `*=1.0` prices every other model. Unset: no money is shown, only hours.
                    A project's own prices (set on the fleet page) come first.
PERFWEB_CURRENCY    the currency those prices are in (USD)
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from perfweb.env import env_str


def parse_prices(text: str, *, name: str = "PERFWEB_GPU_PRICES") -> dict[str, float]:
    """`H100=2.49,A100=1.29,*=1.0` → {"H100": 2.49, ...}; a bad entry fails loudly."""
    prices: dict[str, float] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        model, sep, price = entry.partition("=")
        try:
            value = float(price) if sep and model.strip() else -1.0
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):
            raise ImproperlyConfigured(f"{name}: {entry!r} is not MODEL=PRICE (PRICE ≥ 0)")
        prices[model.strip()] = value
    return prices


def default_prices() -> dict[str, float]:
    value = getattr(settings, "PERFWEB_GPU_PRICES", None)
    if isinstance(value, dict):
        return {str(k): float(v) for k, v in value.items()}
    return parse_prices(env_str("PERFWEB_GPU_PRICES", default=""))


def currency() -> str:
    return getattr(settings, "PERFWEB_CURRENCY", None) or env_str("PERFWEB_CURRENCY", default="USD")


def price_for(model: str, prices: dict[str, float]) -> float | None:
    """The price per GPU-hour of a GPU model: the longest key its name contains, else `*`."""
    lowered = model.lower()
    matches = [key for key in prices if key != "*" and key.lower() in lowered]
    if matches:
        return prices[max(matches, key=len)]
    return prices.get("*")
