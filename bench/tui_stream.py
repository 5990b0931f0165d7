"""Benchmark: stream 50 000 output lines into the wizard and measure key-press → repaint latency.

The output comes through the real engine path: a local command run by `LocalTransport` on the
wizard session's bus (redaction, JSON Lines run log, tracker, the UI's batching sink, the page's
bounded `Log`). While it streams, characters are typed into the Connect page's host field; the
latency is the time from posting the key to the first frame rendered (compositor update encoded
to terminal segments) that shows the new value. The idle baseline does the same with no stream.

    uv run python bench/tui_stream.py [--lines 50000] [--keys 60] [--json]

Prints the figures and the ratios streaming/idle (median, p95).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import RenderableType  # noqa: E402
from textual import events  # noqa: E402
from textual.screen import Screen  # noqa: E402
from textual.widgets import Input, Log  # noqa: E402

from provisioner.playbook import load  # noqa: E402
from provisioner.transport.local import LocalTransport  # noqa: E402
from screens.app import ProvisionerApp  # noqa: E402
from screens.wizard_session import WizardSession  # noqa: E402

# Realistic long lines: what a `uv pip install` / NVIDIA installer log looks like.
GENERATOR = r"""
import sys
w = sys.stdout.write
for i in range({n}):
    w(f"[{{i:05d}}] Downloading nvidia_cudnn_cu12-9.10.2.21-py3-none-manylinux_2_27_x86_64.whl "
      f"({{(i * 7919) % 1000}}.{{i % 10}} MiB) -> /opt/torch-venv/lib/python3.12/site-packages [ok]\n")
"""


class BenchApp(ProvisionerApp):
    """Records when the first frame showing the typed character is rendered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.expect: str | None = None  # the host value before the key
        self.frame: asyncio.Future[float] | None = None
        self.frames = 0

    def _display(self, screen: Screen[Any], renderable: RenderableType | None) -> None:
        super()._display(screen, renderable)
        if renderable is None:
            return
        self.frames += 1
        # The headless driver skips the terminal encoding; do it so a frame costs what it costs.
        render = getattr(renderable, "render_segments", None)
        if render is not None:
            render(self.console)
        if self.frame is not None and not self.frame.done() and self.expect is not None:
            host = self.screen.query_one("#target--host", Input)
            if host.value != self.expect:
                self.frame.set_result(time.perf_counter())


async def type_and_measure(app: BenchApp, pilot: Any, char: str) -> float:
    host = app.screen.query_one("#target--host", Input)
    app.expect = host.value  # the frame that shows a different value is the repaint
    app.frame = asyncio.get_running_loop().create_future()
    start = time.perf_counter()
    key = events.Key(char, char)
    key.set_sender(app)
    assert app._driver is not None
    app._driver.send_message(key)  # the path a real terminal's key takes
    try:
        end = await asyncio.wait_for(app.frame, 3)
    except TimeoutError:
        print("DEBUG", repr(host.value), repr(app.expect), app.frames, app.focused, file=sys.stderr)
        raise
    return (end - start) * 1000.0


async def measure(lines: int, keys: int, gap_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PROVISIONER_STATE_DIR"] = tmp
        playbook = load(ROOT / "playbooks" / "blackwell-8gpu-lxc.yaml")
        session = WizardSession(playbook, playbook_path="bench", runs_dir=Path(tmp))
        app = BenchApp(session)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            page = app.screen
            host = page.query_one("#target--host", Input)
            host.focus()
            host.value = "pve1"
            host.cursor_position = len(host.value)
            await pilot.pause()

            idle: list[float] = []
            for i in range(keys):
                idle.append(await type_and_measure(app, pilot, "abcdefghij"[i % 10]))
                await asyncio.sleep(gap_s)
            host.value = "pve1"
            await pilot.pause()

            transport = LocalTransport(session.bus, "bench")
            script = GENERATOR.format(n=lines)
            done = asyncio.Event()
            started = time.perf_counter()
            elapsed: list[float] = []

            async def stream() -> None:
                await transport.run([sys.executable, "-c", script], timeout=600)
                elapsed.append(time.perf_counter() - started)
                done.set()

            app.start_engine(page, stream())
            frames_before = app.frames
            busy: list[float] = []
            while not done.is_set():
                try:
                    busy.append(await type_and_measure(app, pilot, "klmnopqrst"[len(busy) % 10]))
                except TimeoutError:
                    busy.append(10_000.0)
                await asyncio.sleep(gap_s)
            await pilot.pause()
            log = page.query_one("#log", Log)
            stream_frames = app.frames - frames_before
            kept = log.line_count
            await transport.close()
    total = elapsed[0] if elapsed else float("nan")
    return {
        "lines": lines,
        "stream_seconds": round(total, 3),
        "lines_per_second": round(lines / total) if total else None,
        "frames_during_stream": stream_frames,
        "log_lines_kept": kept,
        "idle_ms": summary(idle),
        "streaming_ms": summary(busy),
        "ratio_median": round(statistics.median(busy) / statistics.median(idle), 2),
        "ratio_p95": round(p95(busy) / p95(idle), 2),
    }


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "median": round(statistics.median(values), 2), "p95": round(p95(values), 2),
            "max": round(max(values), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--keys", type=int, default=40, help="key presses for the idle baseline")
    parser.add_argument("--gap", type=float, default=0.02, help="seconds between key presses")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(measure(args.lines, args.keys, args.gap))
    if args.json:
        print(json.dumps(result))
        return
    print(f"streamed {result['lines']} lines in {result['stream_seconds']} s "
          f"({result['lines_per_second']} lines/s, {result['frames_during_stream']} frames; "
          f"log keeps {result['log_lines_kept']} lines)")
    for name in ("idle_ms", "streaming_ms"):
        s = result[name]
        print(f"key→repaint {name[:-3]:>9}: median {s['median']} ms  p95 {s['p95']} ms  max {s['max']} ms  (n={s['n']})")
    print(f"ratio streaming/idle: median ×{result['ratio_median']}  p95 ×{result['ratio_p95']}")


if __name__ == "__main__":
    main()
