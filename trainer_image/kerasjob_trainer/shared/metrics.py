"""Progress reporting: progress.json, Prometheus text at /metrics, and log lines.

No TensorFlow here. The chief owns one `ProgressReporter`; the HTTP server runs in a daemon
thread so it can never keep a finished or failed trainer alive.
"""

from __future__ import annotations

import dataclasses
import functools
import http.server
import json
import math
import os
import threading
from collections.abc import Callable
from typing import Any

import kerasjob_contract as contract
from kerasjob_contract.times import format_time, utcnow


@dataclasses.dataclass
class Progress:
    epoch: int = 0
    step: int = 0
    total_steps: int = 0
    loss: float | None = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    samples_per_second: float | None = None
    done: bool = False
    updated_at: str = ""
    goodput: dict[str, Any] | None = None  # goodput.Ledger.totals(), after a disruption

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "step": self.step,
            "totalSteps": self.total_steps,
            "loss": self.loss,
            "metrics": self.metrics,
            "samplesPerSecond": self.samples_per_second,
            "done": self.done,
            "updatedAt": self.updated_at,
            **({"goodput": self.goodput} if self.goodput is not None else {}),
        }


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_prometheus(p: Progress) -> str:
    """Prometheus text exposition format 0.0.4, metric names from contract.py."""
    lines: list[str] = []
    gauge = functools.partial(_gauge, lines)
    gauge(contract.METRIC_EPOCH, "Current training epoch (0-based).", [("", p.epoch)])
    gauge(contract.METRIC_STEP, "Optimizer steps done (global, across restarts).", [("", p.step)])
    gauge(
        contract.METRIC_LOSS,
        "Training loss of the last logged step.",
        [("", p.loss)] if p.loss is not None else [],
    )
    gauge(
        contract.METRIC_SAMPLES_PER_SECOND,
        "Global training throughput.",
        [("", p.samples_per_second)] if p.samples_per_second is not None else [],
    )
    gauge(
        contract.METRIC_TRAINING_METRIC,
        "Training metrics of the last logged step.",
        [(f'{{name="{_escape_label(k)}"}}', v) for k, v in sorted(p.metrics.items())],
    )
    _goodput_gauges(gauge, p.goodput)
    return "\n".join(lines) + "\n"


def _gauge(
    lines: list[str],
    name: str,
    help_text: str,
    samples: list[tuple[str, float]],
    kind: str = "gauge",
) -> None:
    if not samples:
        return
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    lines.extend(f"{name}{labels} {_number(v)}" for labels, v in samples)


def _goodput_gauges(gauge: Callable[..., None], goodput: dict[str, Any] | None) -> None:
    g = goodput or {"disruptions": 0, "lostSeconds": 0.0, "stepsRedone": 0}
    gauge(
        contract.METRIC_DISRUPTIONS,
        "Disruptions the job recovered from.",
        [("", g["disruptions"])],
        "counter",
    )
    gauge(
        contract.METRIC_LOST_SECONDS,
        "Seconds lost to disruptions (downtime and redone steps).",
        [("", g["lostSeconds"])],
        "counter",
    )
    gauge(
        contract.METRIC_STEPS_REDONE,
        "Steps trained again after disruptions.",
        [("", g["stepsRedone"])],
        "counter",
    )
    if goodput is not None:
        gauge(
            contract.METRIC_PRODUCTIVE_SECONDS,
            "Training seconds not lost to disruptions.",
            [("", g["productiveSeconds"])],
            "counter",
        )
        gauge(
            contract.METRIC_GOODPUT_RATIO,
            "Productive / (productive + lost) seconds.",
            [("", g["goodput"])],
        )


def now_iso() -> str:
    return format_time(utcnow())


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    """Readers (the operator, the demo, the evaluator) never see a half-written file."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


class ProgressReporter:
    """Holds the latest progress; writes progress.json and serves /metrics."""

    def __init__(self, output_dir: str | None, port: int | None) -> None:
        self.progress = Progress()
        self._lock = threading.Lock()
        self._path = os.path.join(output_dir, contract.PROGRESS_FILE) if output_dir else None
        self._server: http.server.ThreadingHTTPServer | None = None
        if port:
            self._server = _serve(self, port)

    @property
    def port(self) -> int | None:
        return self._server.server_address[1] if self._server else None

    def update(self, **changes: Any) -> None:
        with self._lock:
            for key, value in changes.items():
                setattr(self.progress, key, value)
            self.progress.updated_at = now_iso()
            snapshot = self.progress.to_json()
        if self._path:
            write_json_atomic(self._path, snapshot)

    def render(self) -> str:
        with self._lock:
            return render_prometheus(self.progress)

    def write_termination_message(self, path: str | None = None) -> bool:
        """The last progress into the container's termination message (`path`, default
        contract.termination_log: the kubelet mounts it in every container; elsewhere it does
        not exist and nothing is written)."""
        path = path or contract.termination_log(os.environ)
        if not os.path.exists(path):
            return False
        text = termination_message(self.render())
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError:
            return False
        return True

    def close(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()


def termination_message(metrics_text: str) -> str:
    """/metrics samples without comments, cut to whole lines within the kubelet's limit
    (the training metrics' lines go first when it is too long: they are the longest)."""
    lines = [ln for ln in metrics_text.splitlines() if ln and not ln.startswith("#")]
    limit = contract.TERMINATION_MESSAGE_BYTES

    def size(kept: list[str]) -> int:
        return len("\n".join(kept).encode()) + 1

    if size(lines) > limit:
        lines = [ln for ln in lines if not ln.startswith(contract.METRIC_TRAINING_METRIC)]
    while lines and size(lines) > limit:
        lines.pop()
    return "\n".join(lines) + "\n" if lines else ""


def leave_invalid_config(reason: str, path: str | None = None) -> bool:
    """The line of an exit 78 (contract.invalid_config_line, the reason cut to
    INVALID_CONFIG_REASON_CHARS) added to the container's termination message (`path`,
    default contract.termination_log), last: what is there already (the chief's last
    metrics) is kept, whole lines within TERMINATION_MESSAGE_BYTES. Nothing is written where
    `path` does not exist (outside a Pod), as `write_termination_message`."""
    path = path or contract.termination_log(os.environ)
    if not os.path.exists(path):
        return False
    cut = len(contract.LOG_INVALID_CONFIG) + contract.INVALID_CONFIG_REASON_CHARS
    line = (contract.invalid_config_line(reason)[:cut] + "\n").encode()
    room = contract.TERMINATION_MESSAGE_BYTES - len(line)
    try:
        with open(path, "rb") as f:
            before = f.read(contract.TERMINATION_MESSAGE_BYTES)
        kept = b""
        for old in before.splitlines():
            if len(kept) + len(old) + 1 > room:
                break
            kept += old + b"\n"
        with open(path, "wb") as f:
            f.write(kept + line)
    except OSError:
        return False
    return True


def _serve(reporter: ProgressReporter, port: int) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = reporter.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
            pass

    server = http.server.ThreadingHTTPServer(("", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="kerasjob-metrics", daemon=True).start()
    return server
