"""verl reward function backed by the corrgrpo services: `compute_score` for verl 0.9's reward loop.

    reward.custom_reward_function.path=pkg://corrgrpo_adapters.verl_reward \\
    reward.custom_reward_function.name=compute_score

(a file path to this module works too). Settings are verl's reward kwargs
(`+reward.custom_reward_function.reward_kwargs.<name>=...`): `corrgrpo_services`, the services and their
URLs (`{code:'http://127.0.0.1:8101',toolcall:'http://127.0.0.1:8102'}`); `corrgrpo_weights`, overrides of a
service's declared weights (`{code:{efficiency:0}}`); `corrgrpo_on_error` (`raise`, or `zero`);
`corrgrpo_batch_window_s` (0.02). The bearer token, if any, is `CORRGRPO_API_TOKEN`.

verl 0.9 calls the function once per item, concurrently on one event loop: the items that arrive within
the batch window go to their service in one request.

An item's service is `extra_info["corrgrpo_service"]`, else its `data_source`. The item is generic
(`corrgrpo_proto.items`): the `extra_info` entries that are item fields, the fields the `ground_truth` label
carries (a JSON object, or a bare string for the service's label field: a code `task_id`, a tool-call
reference), and the solution as `completion`.

The weights are the service's declared ones (`/v1/components`, `resolve_weights`) with the overrides applied.
They go with each request, so `score` is the service's `total` under them, and with each result as
`corrgrpo_weights` (JSON), from which the `corrgrpo` estimator (`verl_estimator`) weighs the components.

Each call returns `{"score": total, <component>: value, ..., "corrgrpo_weights": "{...}", "corrgrpo_error":
""}` with the same keys for every item: the components of every configured service (0 where a service lacks
one), because verl builds its `reward_extra_info` columns from the first item's keys. An item the service
could not score raises `RuntimeError` naming it (verl has no missing reward; the rule of
`corrgrpo_proto.common`). With `corrgrpo_on_error=zero` it gets score 0, every component 0, and the reason in
`corrgrpo_error`: the `corrgrpo` estimator leaves such a rollout out of its group (advantage 0), verl's other
estimators do not.
"""

from __future__ import annotations

import asyncio
import json
import os
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

from corrgrpo_proto.client import AsyncRewardClient
from corrgrpo_proto.common import ComponentsResponse, ItemResult, resolve_weights

ERROR_KEY = "corrgrpo_error"
WEIGHTS_KEY = "corrgrpo_weights"
T = TypeVar("T")


class _Once(Generic[T]):
    """The result of `make()`, fetched once by concurrent callers. Fetched again after a failure."""

    def __init__(self, make: Callable[[], Awaitable[T]]) -> None:
        self.make, self.task = make, None

    async def get(self) -> T:
        if self.task is None or (self.task.done() and self.task.exception() is not None):
            self.task = asyncio.ensure_future(self.make())
        return await asyncio.shield(self.task)


class _Service:
    """One service on one event loop: its item shape, and a queue that sends what arrives together as one
    batch."""

    def __init__(self, name: str, url: str, overrides: Mapping[str, float], window_s: float) -> None:
        self.name, self.overrides, self.window_s = name, overrides, window_s
        self.client = AsyncRewardClient(url, token=os.environ.get("CORRGRPO_API_TOKEN"))
        self.shape = _Once(self.client.item_shape)
        self.declared: _Once[ComponentsResponse] = _Once(self.client.components)
        self.pending: list[tuple[dict[str, Any], asyncio.Future[ItemResult]]] = []

    async def names(self) -> list[str]:
        return [spec.name for spec in (await self.declared.get()).components]

    async def weights(self) -> dict[str, float]:
        """Every component's weight: declared, the `corrgrpo_weights` overrides applied."""
        try:
            return resolve_weights((await self.declared.get()).components, self.overrides)
        except KeyError as unknown:
            raise ValueError(
                f"corrgrpo_weights.{self.name}: {self.name} has no component {unknown}"
            ) from None

    async def score(self, item: dict[str, Any]) -> ItemResult:
        future: asyncio.Future[ItemResult] = asyncio.get_running_loop().create_future()
        self.pending.append((item, future))
        if len(self.pending) == 1:
            asyncio.get_running_loop().call_later(self.window_s, lambda: asyncio.ensure_future(self._flush()))
        return await future

    async def _flush(self) -> None:
        batch, self.pending = self.pending, []
        try:
            results = await self.client.score([item for item, _ in batch], await self.weights())
        except BaseException as error:  # every caller of this batch sees the failure
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)


# Per event loop: a client's connections and futures belong to the loop that made them.
_services: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str, str], _Service]] = (
    weakref.WeakKeyDictionary()
)


def _service(
    name: str,
    urls: Mapping[str, str],
    weights: Mapping[str, Mapping[str, float]] | None = None,
    window_s: float = 0.02,
) -> _Service:
    if name not in urls:
        raise ValueError(
            f"no URL for corrgrpo service {name!r} in reward_kwargs.corrgrpo_services ({dict(urls)})"
        )
    overrides = dict((weights or {}).get(name) or {})
    key = (name, urls[name], json.dumps(overrides, sort_keys=True))
    services = _services.setdefault(asyncio.get_running_loop(), {})
    if key not in services:
        services[key] = _Service(name, urls[name], overrides, window_s)
    return services[key]


async def all_component_names(urls: Mapping[str, str]) -> list[str]:
    """The components of every configured service, each name once, in order."""
    names = [await _service(name, urls).names() for name in sorted(urls)]
    return list(dict.fromkeys(name for part in names for name in part))


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    corrgrpo_services: Mapping[str, str] | None = None,
    corrgrpo_weights: Mapping[str, Mapping[str, float]] | None = None,
    corrgrpo_on_error: str = "raise",
    corrgrpo_batch_window_s: float = 0.02,
    **_: Any,
) -> dict[str, Any]:
    """verl's `compute_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)` for one
    item."""
    extra, urls = dict(extra_info or {}), dict(corrgrpo_services or {})
    name = str(extra.get("corrgrpo_service") or data_source)
    service = _service(name, urls, corrgrpo_weights, corrgrpo_batch_window_s)
    shape = await service.shape.get()
    label = shape.label_fields(ground_truth) if ground_truth is not None else {}
    item = {**shape.item(solution_str, extra), **label, "completion": solution_str}
    result, keys, weights = await asyncio.gather(
        service.score(item), all_component_names(urls), service.weights()
    )
    base = {**dict.fromkeys(keys, 0.0), WEIGHTS_KEY: json.dumps(weights)}
    if result.error is None:
        return {"score": float(result.total or 0.0), **base, **(result.components or {}), ERROR_KEY: ""}
    reason = f"{result.error.code}: {result.error.message}"
    if corrgrpo_on_error != "zero":
        raise RuntimeError(f"{service.name} could not score an item of {data_source!r}: {reason}")
    return {"score": 0.0, **base, ERROR_KEY: reason}
