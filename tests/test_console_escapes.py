"""Terminal escapes in step names and remote output never reach the terminal (issue #19).

The renderer writes to a real rich Console (a file, as when stderr is redirected, and forced to a
terminal so rich emits its own styling); only rich's own SGR sequences may appear in what it wrote.
"""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from provisioner.events import (
    CommandStarted,
    Message,
    OutputLine,
    PlanReady,
    Progress,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
)
from provisioner.render.console import ConsoleRenderer
from provisioner.render.safe_text import plain

HOSTILE = [
    "\x1b]0;pwned-title\x07",            # OSC 0: set window title
    "\x1b]52;c;cm0gLXJmIH4=\x07",         # OSC 52: write the clipboard
    "\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\",  # OSC 8 hyperlink
    "\x1b[2J\x1b[H",                      # clear screen, cursor home
    "\x1b[1A\x1b[2Kfake: ok",             # rewrite the previous line
    "\x1bP+q544e\x1b\\",                  # DCS request
    "\x9b31m",                            # C1 CSI
    "\x07\x08\x7f\r",                     # bell, backspace, DEL, carriage return
    "abc\u202egnp.exe",                   # right-to-left override
]
_RICH_SGR = re.compile(r"\x1b\[[0-9;]*m")


def _render(events: list[object]) -> str:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system="truecolor", width=200, highlight=False,
                      soft_wrap=True)
    renderer = ConsoleRenderer(console, verbose=True, multi_host=True)
    for event in events:
        renderer(event)  # type: ignore[arg-type]
    return buf.getvalue()


@pytest.mark.parametrize("evil", HOSTILE)
def test_escapes_in_every_rendered_field_are_neutralised(evil: str) -> None:
    host = f"pve{evil}"
    out = _render([
        RunStarted(run_id="r1", playbook=f"pb{evil}.yaml", mode="apply", hosts=[host]),
        StepStarted(host=host, index=0, step="lxc.create", title=f"Create {evil} (my step {evil})"),
        PlanReady(host=host, index=0, step="lxc.create", changes=[f"change {evil}"], notes=[f"note {evil}"]),
        CommandStarted(host=host, target="ssh", command=f"echo {evil}", cmd_id=1),
        OutputLine(host=host, cmd_id=1, line=f"remote says {evil} done"),
        Message(host=host, level="error", text=f"pve said {evil}\nsecond {evil}"),
        StepFinished(host=host, index=0, step="lxc.create", status="failed", message=f"bad {evil}\nmore {evil}",
                     diagnosis=[{"category": "x", "root_cause": f"cause {evil}", "fix": f"fix {evil}"}]),
        RunFinished(run_id="r1", status="failed", recap={host: {"ok": 0, "changed": 0, "failed": 1, "skipped": 0}}),
    ])
    stripped = _RICH_SGR.sub("", out)
    assert "\x1b" not in stripped, repr(stripped[:400])
    assert not re.search(r"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e]", stripped), repr(stripped[:400])
    assert "remote says" in stripped and "done" in stripped  # the text around the escape is kept


@pytest.mark.parametrize("evil", HOSTILE)
def test_progress_descriptions_are_plain_and_not_markup(evil: str) -> None:
    buf = io.StringIO()
    renderer = ConsoleRenderer(Console(file=buf, width=200, force_terminal=True), verbose=True)  # bars: a terminal's
    renderer(Progress(host="h", task=f"download [bold]{evil}", completed=1, total=2, unit=""))
    assert renderer._progress is not None
    (task,) = renderer._progress.tasks
    renderer._stop_progress()
    assert "\x1b" not in task.description and "\x07" not in task.description
    assert task.description.startswith("download \\[bold]")  # escaped: shown literally, not as markup


@pytest.mark.parametrize(("given", "shown"), [
    ("plain text", "plain text"), ("\x1b[31mred\x1b[0m", "red"), ("tab\there", "tab     here"),
    ("a\x1b]0;t\x07b", "ab"), ("a\nb", "a\ufffdb"), ("x\x00y", "x\ufffdy"),
])
def test_plain(given: str, shown: str) -> None:
    assert plain(given) == shown
    assert plain("a\nb", multiline=True) == "a\nb"
