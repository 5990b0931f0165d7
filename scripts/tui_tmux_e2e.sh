#!/usr/bin/env bash
# End-to-end: drive `provisioner tui --lab` in a real terminal (tmux) with send-keys/capture-pane.
#
# Starts a private lab, walks every page with the keyboard (ctrl+r plans, ctrl+r again applies a
# shown plan, ctrl+n goes on), saves the recorded playbook from the Summary page, quits, then
# replays the playbook headless and expects no changes. Exit 0 on success; on failure the last
# screen is printed. Needs tmux and uv. Usage: scripts/tui_tmux_e2e.sh [--keep]
set -euo pipefail
cd "$(dirname "$0")/.."

command -v tmux >/dev/null || { echo "tmux is not installed" >&2; exit 3; }
WORK=$(mktemp -d /tmp/tui-e2e.XXXXXX)
export PROVISIONER_STATE_DIR="$WORK/state" PROVISIONER_LAB_ROOT="$WORK/lab" LANG=C.UTF-8 LC_ALL=C.UTF-8
SESSION="tui-e2e-$$"  # also the name of a private tmux server (-L): no foreign server's environment leaks in
RECORD="$WORK/recorded.yaml"
PROV=(uv run --frozen provisioner)
SCREEN_FILE="$WORK/screen.txt"

cleanup() {
  tmux -L "$SESSION" kill-server 2>/dev/null || true
  "${PROV[@]}" lab down >/dev/null 2>&1 || true
  [[ "${1:-}" == "--keep" ]] || rm -rf "$WORK"
}
trap 'cleanup "${KEEP:-}"' EXIT
[[ "${1:-}" == "--keep" ]] && KEEP=--keep

capture() { tmux -L "$SESSION" capture-pane -p -t "$SESSION" > "$SCREEN_FILE"; cat "$SCREEN_FILE"; }
fail() { echo "FAIL: $*" >&2; echo "---- last screen ----" >&2; capture >&2 || true; exit 1; }

# wait_for REGEX [SECONDS]: poll the pane until it shows REGEX.
wait_for() {
  local pattern=$1 limit=${2:-60} start=$SECONDS
  while (( SECONDS - start < limit )); do
    if capture | grep -Eq -- "$pattern"; then return 0; fi
    sleep 0.3
  done
  fail "timed out after ${limit}s waiting for /$pattern/"
}

"${PROV[@]}" lab up >/dev/null 2>&1 || fail "provisioner lab up failed"

# The shipped playbook with a short burn-in (the lab runs it with gloo on the CPU).
PLAYBOOK="$WORK/playbook.yaml"
uv run --frozen python - "$PLAYBOOK" <<'PY'
import sys, yaml
data = yaml.safe_load(open("playbooks/blackwell-8gpu-lxc.yaml"))
for step in data["steps"]:
    if step["kind"] == "burnin.run":
        step.setdefault("params", {}).update(sizes="8B:1MiB", duration_s=0, phases="preflight,gemm,collectives")
yaml.safe_dump(data, open(sys.argv[1], "w"), sort_keys=False)
PY

tmux -L "$SESSION" new-session -d -s "$SESSION" -x 120 -y 40 \
  "${PROV[*]} tui --lab --playbook '$PLAYBOOK' --record '$RECORD'; echo TUI-EXITED-\$?; sleep 60"
wait_for "1/9 .*Connect" 60

# Walk the step pages: run until the page says Done, confirming shown plans.
for page in Connect Inventory Container Passthrough Driver PyTorch Venv Burn-in; do
  wait_for "[0-9]/9 .*$page" 20
  for _ in $(seq 1 12); do
    tmux -L "$SESSION" send-keys -t "$SESSION" C-r
    sleep 0.5
    start=$SECONDS
    while (( SECONDS - start < 600 )); do
      screen=$(capture)
      if grep -q "running…" <<<"$screen"; then sleep 0.5; continue; fi
      break
    done
    screen=$(capture)
    if grep -q "Done ✓" <<<"$screen"; then break; fi
    if grep -q "Retry" <<<"$screen"; then fail "step failed on page $page"; fi
  done
  grep -q "Done ✓" <<<"$(capture)" || fail "page $page did not finish"
  echo "page $page: done"
  tmux -L "$SESSION" send-keys -t "$SESSION" C-n
done

wait_for "9/9 .*Summary" 20
wait_for "failed=0" 10
tmux -L "$SESSION" send-keys -t "$SESSION" C-s
wait_for "playbook saved to" 20
[[ -s "$RECORD" ]] || fail "no playbook at $RECORD"
tmux -L "$SESSION" send-keys -t "$SESSION" C-q
wait_for "TUI-EXITED-0" 20
echo "saved playbook: $RECORD ($(grep -c 'kind:' "$RECORD") steps)"

# The recorded playbook replays headless against the same lab with no changes.
recap=$("${PROV[@]}" replay "$RECORD" --lab --json 2>"$WORK/replay.log" | tail -n 1) || {
  cat "$WORK/replay.log" >&2; fail "replay of the recorded playbook failed"; }
echo "replay recap: $recap"
python3 - "$recap" <<'EOF' || fail "the replay was not a no-op"
import json, sys
recap = json.loads(sys.argv[1])
assert recap["status"] == "ok", recap
assert all(h["changed"] == 0 and h["failed"] == 0 for h in recap["hosts"].values()), recap
EOF
echo "OK: wizard in tmux against the lab, playbook saved and replayed with no changes"
