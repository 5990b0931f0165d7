#!/usr/bin/env bash
# End-to-end: drive `provisioner tui --lab` in a real terminal (tmux) with send-keys/capture-pane.
#
# Starts a private lab, walks every page with the keyboard at 100x30 (ctrl+r plans, ctrl+r again
# applies a shown plan, ctrl+n goes on), saves the recorded playbook from the Summary page, quits,
# then replays the playbook headless and expects no changes. Exit 0 on success; on failure the
# last screen is printed. Needs tmux and uv. Usage: scripts/tui_tmux_e2e.sh [--keep]
#
# It waits for states, never for time: a page is current when the breadcrumb starts with its
# number ("4/9"), and after each ctrl+r the action bar must settle (not "running…") in a state
# other than the one before the key. An earlier version waited on "[0-9]/9 .*Passthrough", which
# the breadcrumb (listing every title) matches on any page, then slept 0.5 s and read "Done ✓":
# on a busy machine that was the previous page's screen, so the script pressed ctrl+n while the
# Container plan still waited for its confirmation, and the Passthrough step ran before the
# container existed (issue #12: "could not read /etc/pve/lxc/200.conf").
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

# The breadcrumb and the action bar, once two captures in a row agree on them (never a frame that
# is still being drawn); status 1 when they keep changing. Output streaming into the log or a
# progress bar may move elsewhere on the screen meanwhile.
chrome() { capture | sed -n -e '1p' -e '/◀ Back/p'; }
stable_screen() {
  local a b tries=0
  a=$(chrome)
  while (( tries < 10 )); do
    sleep 0.1
    b=$(chrome)
    [[ "$a" == "$b" ]] && { printf '%s\n' "$b"; return 0; }
    a=$b tries=$((tries + 1))
  done
  return 1
}

# wait_for REGEX [SECONDS]: poll the pane until it shows REGEX.
wait_for() {
  local pattern=$1 limit=${2:-60} start=$SECONDS
  while (( SECONDS - start < limit )); do
    if capture | grep -Eq -- "$pattern"; then return 0; fi
    sleep 0.2
  done
  fail "timed out after ${limit}s waiting for /$pattern/"
}

# The page on screen is page N: the breadcrumb's first line starts with "N/9" (the breadcrumb
# lists every page title, so matching a title alone matches on any page).
wait_page() {
  local n=$1 limit=${2:-60} start=$SECONDS
  while (( SECONDS - start < limit )); do
    local screen
    screen=$(stable_screen || true)
    # the page itself, not the loading frame that precedes it: its action bar is drawn
    if head -n 1 <<<"$screen" | grep -Eq "^ *$n/9 " && grep -q "◀ Back" <<<"$screen"; then return 0; fi
    sleep 0.2
  done
  fail "timed out after ${limit}s waiting for page $n/9"
}

# The page's state from its action bar: "<steps done> <button>", or "busy" while a step runs.
page_state() {
  local screen bar
  screen=$(stable_screen) || { echo busy; return; }
  bar=$(grep -E "◀ Back" <<<"$screen" | tail -n 1)
  if grep -q "running…" <<<"$bar"; then echo busy; return; fi
  echo "$(grep -Eo '[0-9]+/[0-9]+ steps done' <<<"$bar") $(grep -Eo 'Done ✓|Apply \([0-9]+\)|Retry|Plan' <<<"$bar" | tail -n 1)"
}

# press_run: ctrl+r, then wait until the page has settled in a different state than before it (the
# key was handled and the step it started has finished): no fixed sleep, no stale screen.
press_run() {
  local before=$1 limit=${2:-900} start=$SECONDS state
  tmux -L "$SESSION" send-keys -t "$SESSION" C-r
  while (( SECONDS - start < limit )); do
    state=$(page_state)
    if [[ "$state" != busy && "$state" != "$before" ]]; then echo "$state"; return 0; fi
    sleep 0.2
  done
  fail "timed out after ${limit}s waiting for the page to leave state '$before'"
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

tmux -L "$SESSION" new-session -d -s "$SESSION" -x 100 -y 30 \
  "${PROV[*]} tui --lab --playbook '$PLAYBOOK' --record '$RECORD'; echo TUI-EXITED-\$?; sleep 60"
wait_page 1 60

# Walk the step pages: ctrl+r plans, ctrl+r on a shown plan ("Apply (n)") confirms it, until Done.
n=0
for page in Connect Inventory Container Passthrough Driver PyTorch Venv Burn-in; do
  n=$((n + 1))
  wait_page "$n" 30
  grep -q "$page" <<<"$(stable_screen | head -n 1)" || fail "page $n/9 is not $page"
  state=$(page_state)
  for _ in $(seq 1 12); do
    [[ "$state" == *"Done ✓" ]] && break
    [[ "$state" == *Retry ]] && fail "step failed on page $page"
    state=$(press_run "$state")
    echo "  $page: $state"
  done
  [[ "$state" == *"Done ✓" ]] || fail "page $page did not finish (state: $state)"
  echo "page $page: done"
  tmux -L "$SESSION" send-keys -t "$SESSION" C-n
done

wait_page 9 30
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
