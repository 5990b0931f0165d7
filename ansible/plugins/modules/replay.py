#!/usr/bin/python
# Copyright: gpu-provisioner contributors
# MIT License (see the repository's LICENSE)
"""Ansible module: run one gpu-provisioner playbook on one Proxmox node (replay, or plan --check)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: replay
short_description: Provision one Proxmox VE GPU node with a gpu-provisioner playbook
version_added: "0.1.0"
description:
  - Runs C(provisioner replay PLAYBOOK --inventory ONE-HOST --json) for one host and maps the tool's
    contract onto Ansible's. In check mode it runs C(provisioner plan PLAYBOOK --inventory ONE-HOST --check --json)
    instead, which changes nothing on the node.
  - C(changed) is true when the recap counts changed steps (in check mode, steps with pending changes).
    C(failed) is true when the tool exits non-zero (in check mode exit 10, changes pending, is not a failure).
  - The tool talks to the node itself (SSH and the Proxmox API), so run the task on the controller
    (C(delegate_to=localhost) or C(connection=local)).
  - Secrets are never arguments. The API password and token are given as references
    (C(env:NAME) or C(file:PATH)) that the tool resolves on the controller; a literal value is refused and never
    repeated in the output.
options:
  playbook:
    description: Path of the gpu-provisioner playbook (YAML) on the controller.
    type: path
    required: true
  name:
    description: The host's label in the recap (normally C({{ inventory_hostname }})).
    type: str
  host:
    description: SSH and API address of the Proxmox node. Required unless O(lab_root) is given.
    type: str
  node:
    description: Proxmox node name (default is the playbook's).
    type: str
  container:
    description: CT id overriding the playbook's.
    type: int
  lab_root:
    description: >-
      A running gpu-provisioner lab (C(provisioner lab up --root DIR)) instead of a real node: its entry
      (endpoints and site profile) comes from C(provisioner lab inventory --root DIR).
    type: path
  site:
    description: A site profile (YAML with this site's mirrors and sizes) applied at run time, never recorded.
    type: path
  ssh:
    description: SSH settings for the node.
    type: dict
    suboptions:
      user: {description: Login user., type: str, default: root}
      port: {description: SSH port., type: int, default: 22}
      key_file: {description: Private key on the controller., type: path}
      known_hosts: {description: known_hosts file on the controller., type: path}
  api:
    description: Proxmox API settings. Only references to secrets.
    type: dict
    suboptions:
      port: {description: API port., type: int, default: 8006}
      user: {description: API user., type: str, default: root@pam}
      password_ref:
        description: C(env:NAME) or C(file:PATH) holding the API password.
        type: str
      token_name: {description: API token id (with O(api.token_value_ref))., type: str}
      token_value_ref:
        description: C(env:NAME) or C(file:PATH) holding the API token secret.
        type: str
      ca_file: {description: CA bundle that signs the node's API certificate., type: path}
      verify_tls: {description: Verify the API certificate., type: bool, default: true}
      fingerprint: {description: Pin the API certificate by its SHA-256 fingerprint., type: str}
  command:
    description: How to start the tool, as an argv list (e.g. C([uv, run, --project, /opt/gpu-provisioner, provisioner])).
    type: list
    elements: str
    default: [provisioner]
  chdir:
    description: Working directory for the tool (relative playbook paths are resolved from here).
    type: path
  state_dir:
    description: C(PROVISIONER_STATE_DIR) for the run (run logs, fleet reports); default is the controller user's.
    type: path
  trust_new_host:
    description: Accept and record an unknown SSH host key of the node.
    type: bool
    default: false
  timeout:
    description: Seconds the tool may run before the task fails.
    type: int
    default: 7200
attributes:
  check_mode:
    support: full
    details: Check mode runs C(provisioner plan --check); nothing on the node changes.
  diff_mode:
    support: none
notes:
  - Concurrency is Ansible's, C(--forks) replays at once, C(serial) per batch; every replay is a separate
    process with its own lock per (node, container).
author:
  - gpu-provisioner contributors
"""

EXAMPLES = r"""
- name: Provision the GPU container of every node
  gpu_provisioner.fleet.replay:
    playbook: playbooks/blackwell-8gpu-lxc.yaml
    name: "{{ inventory_hostname }}"
    host: "{{ ansible_host }}"
    node: "{{ inventory_hostname_short }}"
    ssh: {key_file: ~/.ssh/id_ed25519, known_hosts: ~/.ssh/known_hosts}
    api: {password_ref: env:PVE_PASSWORD, ca_file: /etc/gpu-provisioner/pve-ca.pem}
  delegate_to: localhost
  register: provision

- name: What would change (ansible-playbook --check runs plan --check)
  ansible.builtin.debug:
    var: provision.pending
"""

RETURN = r"""
report:
  description: The tool's recap, the last line of its C(--json) output.
  returned: when the tool printed one
  type: dict
  sample: {"hosts": {"pve-r1n1": {"ok": 5, "changed": 2, "failed": 0, "skipped": 0, "interrupted": 0}}, "status": "ok"}
counts:
  description: This host's step counts (ok, changed, failed, skipped, interrupted).
  returned: when the tool printed a recap
  type: dict
steps:
  description: Every step of the run with its status, message and (planned) changes, from the run log.
  returned: always
  type: list
  elements: dict
pending:
  description: The changes the plan would make, one line per change (check mode).
  returned: always
  type: list
  elements: str
exit_status:
  description: The tool's exit status (0 ok, 1 failed, 2 invalid input, 3 unsupported, 4 unreachable, 10 pending).
  returned: always
  type: int
run_log:
  description: Path of the run log (JSON Lines) on the controller.
  returned: when the tool wrote one
  type: str
mode:
  description: C(plan) in check mode, else C(apply).
  returned: always
  type: str
"""

import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

REF_RE = re.compile(r"^(env|file):.+$")
RUN_LOG_RE = re.compile(r"run log: (\S+\.jsonl)")
EXIT_MEANING = {1: "failed", 2: "invalid input (playbook, inventory or flag)", 3: "unsupported",
                4: "unreachable or authentication failed", 10: "changes pending"}


def _entry(params):
    """The one-host gpu-provisioner inventory entry (provisioner/fleet.py InventoryHost) of a real node."""
    entry = {"name": params["name"] or params["host"]}
    for key in ("host", "node", "container", "site"):
        if params[key] is not None:
            entry[key] = params[key]
    ssh = params["ssh"]
    if ssh:
        entry["ssh"] = {k: v for k, v in ssh.items() if v is not None}
    api = params["api"]
    if api:
        renamed = {"password_ref": "password", "token_value_ref": "token_value"}
        entry["api"] = {renamed.get(k, k): v for k, v in api.items() if v is not None}
    return entry


def _lab_inventory(params, name):
    """`provisioner lab inventory`: the running lab's entry (the inventory format knows no lab);
    (inventory text, None) or (None, why)."""
    argv = [*params["command"], "lab", "inventory", "--root", params["lab_root"], "--name", name]
    if params["container"] is not None:
        argv += ["--container", str(params["container"])]
    try:
        proc = subprocess.run(argv, cwd=params["chdir"], capture_output=True, text=True, timeout=120, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if proc.returncode != 0:
        return None, (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    return proc.stdout, None


def _events(path):
    events = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return events


def _steps(events, host):
    """Per step: status, message, planned changes (a run log holds one host here)."""
    steps = {}
    for ev in events:
        if ev.get("host") not in (host, None, "") or "step" not in ev:
            continue
        row = steps.setdefault(ev.get("index", len(steps)), {"step": ev["step"], "status": None, "changes": []})
        if ev.get("kind") == "step.plan":
            row["changes"] = list(ev.get("changes") or [])
        elif ev.get("kind") == "step.finished":
            row["status"] = ev.get("status")
            row["message"] = ev.get("message", "")
    return [steps[k] for k in sorted(steps)]


def _recap(stdout):
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def main():
    module = AnsibleModule(
        argument_spec={
            "playbook": {"type": "path", "required": True},
            "name": {"type": "str"},
            "host": {"type": "str"},
            "node": {"type": "str"},
            "container": {"type": "int"},
            "lab_root": {"type": "path"},
            "site": {"type": "path"},
            "ssh": {"type": "dict", "options": {
                "user": {"type": "str", "default": "root"},
                "port": {"type": "int", "default": 22},
                "key_file": {"type": "path"},
                "known_hosts": {"type": "path"},
            }},
            "api": {"type": "dict", "options": {
                "port": {"type": "int", "default": 8006},
                "user": {"type": "str", "default": "root@pam"},
                # references, but masked anyway: a secret pasted here by mistake never reaches the output
                "password_ref": {"type": "str", "no_log": True},
                "token_name": {"type": "str"},
                "token_value_ref": {"type": "str", "no_log": True},
                "ca_file": {"type": "path"},
                "verify_tls": {"type": "bool", "default": True},
                "fingerprint": {"type": "str"},
            }},
            "command": {"type": "list", "elements": "str", "default": ["provisioner"]},
            "chdir": {"type": "path"},
            "state_dir": {"type": "path"},
            "trust_new_host": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 7200},
        },
        required_one_of=[("host", "lab_root")],
        mutually_exclusive=[("host", "lab_root")],
        supports_check_mode=True,
    )
    p = module.params
    mode = "plan" if module.check_mode else "apply"
    result = {"changed": False, "mode": mode, "exit_status": None, "steps": [], "pending": []}
    for key in ("password_ref", "token_value_ref"):
        value = (p["api"] or {}).get(key)
        if value is not None and not REF_RE.match(value):
            module.fail_json(msg=f"api.{key} must be a secret reference (env:NAME or file:PATH), not the secret "
                                 f"itself; the value given is not shown", **result)
    if p["lab_root"]:
        label = p["name"] or os.path.basename(str(p["lab_root"]).rstrip("/"))
        text, why = _lab_inventory(p, label)
        if text is None:
            module.fail_json(msg=f"the lab at {p['lab_root']}: {' '.join(why) if isinstance(why, list) else why}",
                             **result)
    else:
        entry = _entry(p)
        label = entry["name"]
        text = json.dumps({"hosts": [entry]})  # JSON is YAML
    work = tempfile.mkdtemp(prefix="gpu-provisioner-ansible-")
    try:
        os.chmod(work, 0o700)
        inventory = os.path.join(work, "inventory.yaml")
        fd = os.open(inventory, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        argv = [*p["command"], "plan" if mode == "plan" else "replay", p["playbook"], "--inventory", inventory, "--json", "--quiet"]
        if p["site"] and p["lab_root"]:
            argv += ["--site", p["site"]]
        argv += ["--check"] if mode == "plan" else ["--parallel", "1"]
        if p["trust_new_host"]:
            argv.append("--trust-new-host")
        env = {"NO_COLOR": "1"}
        if p["state_dir"]:
            env["PROVISIONER_STATE_DIR"] = p["state_dir"]
        if not shutil.which(argv[0]) and not os.path.isabs(argv[0]):
            module.fail_json(msg=f"{argv[0]!r} is not on PATH (set the module's `command`)", **result)
        try:
            proc = subprocess.run(argv, cwd=p["chdir"], env={**os.environ, **env}, capture_output=True, text=True,
                                  timeout=p["timeout"], check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            module.fail_json(msg=f"provisioner {'plan' if mode == 'plan' else 'replay'} did not finish within {p['timeout']}s", **result)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)
    recap = _recap(out)
    found = RUN_LOG_RE.search(err or "")
    result["exit_status"] = rc  # not `rc`: Ansible reads a non-zero `rc` as a failure (exit 10 is not one)
    if found:
        result["run_log"] = found.group(1)
        result["steps"] = _steps(_events(found.group(1)), label)
    result["pending"] = [c for s in result["steps"] for c in s.get("changes", [])] if mode == "plan" else []
    if recap is not None:
        result["report"] = recap
        result["counts"] = (recap.get("hosts") or {}).get(label, {})
        result["changed"] = int(result["counts"].get("changed", 0)) > 0
    ok_codes = (0, 10) if mode == "plan" else (0,)
    if rc not in ok_codes or recap is None:
        failed = [s for s in result["steps"] if s.get("status") == "failed"]
        lines = (err or "").strip().splitlines()
        errors = [ln.split("error:", 1)[1].strip() for ln in lines if "error:" in ln]
        why = (f"{failed[0]['step']}: {failed[0].get('message', '')}" if failed
               else "; ".join(errors[:3]) or "\n".join(lines[-5:]))
        result["stderr_tail"] = (err or "").strip().splitlines()[-20:]
        module.fail_json(msg=f"provisioner {'plan' if mode == 'plan' else 'replay'} exited {rc} ({EXIT_MEANING.get(rc, 'error')}): {why}", **result)
    if mode == "plan":
        result["changed"] = rc == 10 or result["changed"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
