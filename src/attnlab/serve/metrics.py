"""The server's metrics in Prometheus' text exposition format (version 0.0.4), for ``GET
/metrics`` (docs/serve.md, "Operations"): counters, gauges and histograms with labels, written
here so that serving needs no client library.

Every metric is thread-safe (the model's worker threads and the event loop both record). A
label's values must come from a closed set (a route template, a status code): a client's path
is never a label value, so that the number of series stays bounded.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["Counter", "Gauge", "Histogram", "Registry", "RequestMetrics", "ServeMetrics"]

#: Seconds: a request's latency, from a few milliseconds to the longest deadline.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Sentences (or requests) in one batch.
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(int(value)) if float(value).is_integer() else repr(float(value))


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    pairs = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        pairs.append(extra)
    return "{" + ",".join(pairs) + "}" if pairs else ""


class _Metric:
    kind = ""

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        self.name, self.help, self.label_names = name, help, tuple(labels)
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, str]) -> tuple[str, ...]:
        if set(labels) != set(self.label_names):
            raise ValueError(f"{self.name}: expected labels {self.label_names}, got {labels}")
        return tuple(str(labels[n]) for n in self.label_names)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    def lines(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    """A count that only goes up, one per label set."""

    kind = "counter"

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help, labels)
        self._values: dict[tuple[str, ...], float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def lines(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        out = self.header()
        out += [f"{self.name}{_labels(self.label_names, k)} {_number(v)}" for k, v in items]
        return out


class Gauge(_Metric):
    """A value read when the metrics are asked for (``read``), or set."""

    kind = "gauge"

    def __init__(self, name: str, help: str, read: Callable[[], float] | None = None) -> None:
        super().__init__(name, help)
        self.read = read
        self._value = 0.0

    def set(self, value: float) -> None:
        with self._lock:
            self._value = float(value)

    def add(self, amount: float) -> None:
        with self._lock:
            self._value += amount

    def value(self) -> float:
        return float(self.read()) if self.read is not None else self._value

    def lines(self) -> list[str]:
        return [*self.header(), f"{self.name} {_number(self.value())}"]


class Histogram(_Metric):
    """Observations counted in cumulative buckets (``le``), with their sum and count."""

    kind = "histogram"

    def __init__(
        self, name: str, help: str, buckets: Iterable[float], labels: Sequence[str] = ()
    ) -> None:
        super().__init__(name, help, labels)
        self.buckets = tuple(sorted(float(b) for b in buckets))
        self._series: dict[tuple[str, ...], list[float]] = {}  # counts per bucket, +Inf, sum

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            series = self._series.setdefault(key, [0.0] * (len(self.buckets) + 2))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    series[i] += 1
            series[-2] += 1  # +Inf: the count
            series[-1] += value

    def count(self, **labels: str) -> int:
        with self._lock:
            series = self._series.get(self._key(labels))
            return int(series[-2]) if series else 0

    def lines(self) -> list[str]:
        with self._lock:
            items = sorted((k, list(v)) for k, v in self._series.items())
        out = self.header()
        names = self.label_names
        for key, series in items:
            for bound, count in zip(self.buckets, series, strict=False):
                le = f'le="{_number(bound)}"'
                out.append(f"{self.name}_bucket{_labels(names, key, le)} {_number(count)}")
            top = _labels(names, key, 'le="+Inf"')
            out.append(f"{self.name}_bucket{top} {_number(series[-2])}")
            out.append(f"{self.name}_sum{_labels(names, key)} {_number(series[-1])}")
            out.append(f"{self.name}_count{_labels(names, key)} {_number(series[-2])}")
        return out


class Registry:
    """Metrics in the order they were added; :meth:`exposition` is the ``/metrics`` text."""

    def __init__(self) -> None:
        self.metrics: list[_Metric] = []

    def add(self, metric: _Metric) -> _Metric:
        self.metrics.append(metric)
        return metric

    def exposition(self) -> str:
        lines: list[str] = []
        for metric in self.metrics:
            lines += metric.lines()
        return "\n".join(lines) + "\n"


class ServeMetrics:
    """What ``attnlab serve`` counts. The gauges ``queue_depth`` (sentences waiting for the
    batcher), ``explorer_depth`` (explorer requests running or waiting) and ``ready`` (1 once
    warmed up) are read at each scrape: their ``read`` is set by the app."""

    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self) -> None:
        self.registry = Registry()
        self.requests = Counter(
            "attnlab_requests_total",
            "HTTP requests answered, by route and status",
            ("route", "status"),
        )
        self.latency = Histogram(
            "attnlab_request_seconds",
            "seconds from a request's arrival to its answer, by route",
            LATENCY_BUCKETS,
            ("route",),
        )
        self.in_flight = Gauge(
            "attnlab_requests_in_flight", "HTTP requests that have arrived and are not answered yet"
        )
        self.batch_sentences = Histogram(
            "attnlab_batch_sentences", "sentences decoded in one batcher call", SIZE_BUCKETS
        )
        self.batch_requests = Histogram(
            "attnlab_batch_requests", "requests answered by one batcher call", SIZE_BUCKETS
        )
        self.batch_seconds = Histogram(
            "attnlab_batch_seconds", "seconds the model spent on one batch", LATENCY_BUCKETS
        )
        self.dropped = Counter(
            "attnlab_dropped_total",
            "translation requests given up before their turn, by reason",
            ("reason",),
        )
        self.queue_depth = Gauge(
            "attnlab_queue_depth", "sentences waiting for the translation batcher"
        )
        self.explorer_depth = Gauge(
            "attnlab_explorer_queue_depth", "explorer requests running or waiting for the model"
        )
        self.ready = Gauge("attnlab_ready", "1 once the model is loaded and warmed up")
        metrics = [m for m in vars(self).values() if isinstance(m, _Metric)]  # in that order
        self.registry.metrics += metrics

    def exposition(self) -> str:
        return self.registry.exposition()


class RequestMetrics:
    """ASGI middleware that counts every HTTP answer in ``metrics`` by route and status, with
    its latency. ``routes``: the paths counted by name; ``/static/...`` counts as
    ``/static/``, any other path as ``other`` (a client's path is never a label)."""

    def __init__(self, app: Any, metrics: ServeMetrics, routes: Iterable[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = frozenset(routes)

    def route(self, path: str) -> str:
        if path in self.routes:
            return path
        return "/static/" if path.startswith("/static/") else "other"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route, status, start = self.route(scope.get("path", "")), 500, time.perf_counter()

        async def tracking(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.metrics.in_flight.add(1)
        try:
            await self.app(scope, receive, tracking)
        finally:
            self.metrics.in_flight.add(-1)
            self.metrics.requests.inc(route=route, status=str(status))
            self.metrics.latency.observe(time.perf_counter() - start, route=route)
