"""Bounded diagnosis (issue 23 item 2) and the literal prefilter of large logs (issue 27 item 4).

Work is bounded by construction and asserted by size, never by seconds: every pattern runs on RE2
(a regex RE2 refuses cannot be loaded), the bytes the patterns scan are counted and bounded by a
constant times the input, the text the rules see is capped, and the reader refuses FIFOs/devices.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from provisioner.cli import main
from provisioner.diagnose import diagnose, engine, extract, source
from provisioner.diagnose.catalogue import message_patterns
from provisioner.diagnose.normalize import MAX_LINE_CHARS
from provisioner.diagnose.rules import RULES
from provisioner.diagnose.rx import UnsafePattern, compile_rx, literal_regex, required_literals
from provisioner.exitcodes import ExitCode
from provisioner.support.bundle import FORMAT, BundleError, read_bundle

FIXTURES = Path(__file__).parent / "fixtures" / "diagnose"
REAL = [json.loads(line) for line in (FIXTURES / "real-logs.jsonl").read_text(encoding="utf-8").splitlines() if line]
HEALTHY = [json.loads(line) for line in (FIXTURES / "healthy.jsonl").read_text(encoding="utf-8").splitlines() if line]
HEALTHY_TEXT = "\n".join(r["log"] for r in HEALTHY) + "\n"

MB = 1 << 20
# 1 MB adversarial lines: a long hex token, repeated separators, deep nesting, and the tokens each
# family's patterns start with repeated (the inputs that made the backtracking patterns quadratic).
ADVERSARIAL = {
    "hex": "deadbeef0123456789abcdef" * (MB // 24),
    "separators": "-" * MB,
    "dotted-dashes": "a.-" * (MB // 3),
    "colons": ": " * (MB // 2),
    "nesting": "(" * (MB // 2) + ")" * (MB // 2),
    "brackets": "[" * (MB // 2) + "]" * (MB // 2),
    "lib": "lib" * (MB // 3),
    "gcc": "x86_64-gcc-" * (MB // 11),
    "nvidia-path": "/nvidia" * (MB // 7),
    "torch": "torch==2." * (MB // 9),
    "sm": "sm_90 " * (MB // 6),
    "spaces-words": "error " * (MB // 6),
}


def _all_regexes() -> Iterator[tuple[str, str]]:
    for rule in RULES:
        for p in (*message_patterns(rule.messages), *rule.patterns):  # the catalogue's matchers, codes included
            yield rule.name, engine.to_regex(p)
        for extra in (rule.context, rule.unless, *rule.requires):
            if extra:
                yield rule.name, engine.to_regex(extra)
    for rx in extract.FIELD_REGEXES:
        yield "field", rx


def test_every_pattern_is_linear_time_re2() -> None:
    """Each rule/context/unless/field regex compiles under RE2 (an automaton: time linear in the input);
    a backtracking-only construct is refused at load."""
    names = set()
    for name, rx in _all_regexes():
        compiled = compile_rx(rx)
        assert type(compiled).__module__.startswith("re2"), (name, rx)
        names.add(name)
    assert len(names) == len({r.name for r in RULES}) + 1
    with pytest.raises(UnsafePattern):
        compile_rx(r"(?<!x)gcc")
    with pytest.raises(UnsafePattern):
        compile_rx(r"(a+)\1")


def test_every_rule_pattern_has_a_prefilter_literal_or_runs_bare() -> None:
    """Each literal the prefilter uses occurs in every text its pattern matches: the rule's own examples."""
    for rule in RULES:
        for example in rule.examples:
            low = example.lower()
            for p in rule.patterns:
                lits = required_literals(engine.to_regex(p))
                if lits is not None and engine.compile_pattern(p).search(example):
                    assert any(compile_rx(literal_regex(lit)).search(low) for lit in lits), (rule.name, p, lits)


class _Counting:
    """A compiled regex that counts the characters every search/finditer call is given."""

    scanned = 0

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.pattern = inner.pattern

    def search(self, text: Any, pos: int = 0) -> Any:
        _Counting.scanned += len(text) - pos
        return self.inner.search(text, pos)

    def finditer(self, text: Any) -> Any:
        _Counting.scanned += len(text)
        return self.inner.finditer(text)


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_adversarial_megabyte_lines_are_scanned_a_bounded_number_of_times(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every rule over 1 MB adversarial lines (several, and inside a plausible log): the characters the
    rule patterns are given add up to at most (patterns + contexts) x the capped text, and RE2 scans each
    in linear time, so the work is bounded by input size. The lines reaching the rules are capped."""
    real = compile_rx.__wrapped__  # type: ignore[attr-defined]
    monkeypatch.setattr(engine, "compile_pattern", lambda p: _Counting(real("(?:" + engine.to_regex(p) + ")")))
    _Counting.scanned = 0
    line = ADVERSARIAL[kind]
    text = HEALTHY_TEXT + line + "\n" + line + "\n" + "nvidia dkms kernel module\n" + line + "\n"
    seen: list[str] = []
    orig_clean = engine.clean_log

    def clean(t: str) -> Any:
        seen.append(t)
        return orig_clean(t)

    monkeypatch.setattr(engine, "clean_log", clean)
    diagnose(text)
    (ruled,) = seen
    assert len(ruled) <= engine.MAX_WINDOW_CHARS + engine.HEAD_CHARS
    log = orig_clean(ruled)
    assert max(len(v) for v in log.lines) <= MAX_LINE_CHARS
    regexes = sum(len(r.patterns) + (r.context is not None) + (r.unless is not None) + len(r.requires) for r in RULES)
    views = len(log.views)
    bound = regexes * views * (len(log.full_text) + 1) + regexes * len(text)  # windows + whole-log contexts
    assert _Counting.scanned <= bound, (_Counting.scanned, bound)


def test_a_long_line_keeps_its_head_only() -> None:
    from provisioner.diagnose.normalize import clean_log

    log = clean_log("x" * (MAX_LINE_CHARS * 10) + "\nok\n")
    assert len(log.lines[0]) == MAX_LINE_CHARS and log.lines[1] == "ok"


@pytest.mark.parametrize("row", REAL, ids=[r["id"] for r in REAL])
def test_large_log_path_agrees_with_the_small_one(row: dict[str, str]) -> None:
    """Each real failure log, buried at the end of > FAST_PATH_CHARS of healthy output, gets the same top
    finding through the prefilter's windows as alone (healthy padding adds no finding of its own)."""
    small = diagnose(row["log"])
    pad = HEALTHY_TEXT * (engine.FAST_PATH_CHARS // len(HEALTHY_TEXT) + 2)
    big = diagnose(pad + row["log"] + "\n")
    assert len(pad) > engine.FAST_PATH_CHARS
    assert [f.category for f in big[:1]] == [f.category for f in small[:1]]


def test_healthy_padding_alone_is_healthy() -> None:
    pad = HEALTHY_TEXT * (engine.FAST_PATH_CHARS // len(HEALTHY_TEXT) + 2)
    assert diagnose(pad) == []


# --- the reader ---------------------------------------------------------------------------------


def _cli(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provisioner", "diagnose", *args], capture_output=True,
                          text=True, timeout=120, check=False, **kw)


def test_dev_zero_is_refused_with_exit_2() -> None:
    p = _cli(["--log", "/dev/zero", "--json"])
    assert p.returncode == ExitCode.USAGE, p.stderr
    assert "character device" in p.stderr
    assert "Traceback" not in p.stderr


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)  # no writer: opening it for reading in blocking mode would wait forever
    p = _cli(["--log", str(fifo)])
    assert p.returncode == ExitCode.USAGE, p.stderr
    assert "FIFO" in p.stderr


def test_device_on_stdin_is_refused() -> None:
    with open("/dev/zero", "rb") as zero:
        p = _cli(["--log", "-", "--json"], stdin=zero)
    assert p.returncode == ExitCode.USAGE, p.stderr


def test_100_mb_log_is_read_as_head_and_tail_and_says_so(tmp_path: Path) -> None:
    """A sparse 100 MB file: healthy head, a real failure at the very end. The tail is diagnosed and
    the JSON and text outputs say what was not read."""
    row = next(r for r in REAL if r["category"] == "installer_failure")
    big = tmp_path / "huge.log"
    with big.open("wb") as fh:
        fh.write(HEALTHY_TEXT.encode())
        fh.truncate(100_000_000)
        fh.seek(0, os.SEEK_END)
        fh.write(("\n" + row["log"] + "\n").encode())
    assert big.stat().st_size > source.MAX_BYTES
    p = _cli(["--log", str(big), "--json"])
    assert p.returncode == ExitCode.FAILED, p.stderr[-2000:]  # a finding: exit 1 (issue 35)
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    assert doc["findings"][0]["category"] == "installer_failure"
    assert doc["input"]["partial"] is True and doc["input"]["bytes"] == big.stat().st_size
    assert doc["input"]["bytes_read"] <= source.HEAD_BYTES + source.TAIL_BYTES
    assert "not read" in doc["input"]["note"]
    text = _cli(["--log", str(big)])
    assert "not read" in text.stdout and "first" in text.stdout


def test_stream_keeps_head_and_tail_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "HEAD_BYTES", 100)
    monkeypatch.setattr(source, "TAIL_BYTES", 200)
    monkeypatch.setattr(source, "MAX_STREAM_BYTES", 10_000)
    monkeypatch.setattr(source, "CHUNK", 64)
    data = b"".join(b"line %05d\n" % i for i in range(5000))  # 50 kB: more than the stream cap
    got = source._read_stream(io.BytesIO(data))
    assert got.read <= 300 and got.partial
    assert got.text.startswith("line 00000") and "not read" in got.text
    assert "no further" in got.note
    small = source._read_stream(io.BytesIO(data[:250]))
    assert small.text == data[:250].decode() and not small.partial and small.note == ""


def test_tui_paste_is_bounded() -> None:
    text = "a\n" * 100 + "z" * 1000
    cut = source.bound_text(text, max_chars=200)
    assert len(cut) < 400 and cut.startswith("a\n") and cut.endswith("z" * 100) and "not read" in cut
    assert source.bound_text("short") == "short"


# --- the bundle reader ----------------------------------------------------------------------------


def _bundle(tmp_path: Path, manifest: bytes) -> Path:
    path = tmp_path / "b.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("support/manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    return path


def _ok(**over: Any) -> bytes:
    body: dict[str, Any] = {"format": FORMAT, "members": [], "probes": [], "collection": {"host": "n"}}
    body.update(over)
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    "manifest",
    [
        _ok(probes={"a": 1}),
        _ok(probes=["x"]),
        _ok(members=[1, 2]),
        _ok(members=[{"path": ["a"], "sha256": "x"}]),
        _ok(collection=["x"]),
        _ok(collection={"host": {"x": 1}}),
        _ok(probes=[{"name": "p", "file": 3}]),
        b'{"format": "' + FORMAT.encode() + b'", "probes": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b"[" * 200_000,
    ],
    ids=["probes-dict", "probes-str", "members-int", "member-path-list", "collection-list", "host-obj",
         "probe-file-int", "deep-nesting", "deep-unclosed"],
)
def test_malformed_manifest_is_refused_with_exit_2(tmp_path: Path, manifest: bytes) -> None:
    path = _bundle(tmp_path, manifest)
    with pytest.raises(BundleError):
        read_bundle(path)
    result = CliRunner().invoke(main, ["diagnose", "--bundle", str(path), "--json"])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert not isinstance(result.exception, (AttributeError, RecursionError, TypeError))


def test_well_formed_minimal_manifest_is_read(tmp_path: Path) -> None:
    evidence = read_bundle(_bundle(tmp_path, _ok()))
    assert evidence.host == "n" and evidence.records == []
