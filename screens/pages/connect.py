"""Connect: node address, user, auth method; host-key confirmation on first contact."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from textual import on
from textual.app import ComposeResult
from textual.widgets import Static

from provisioner import secrets, validate
from provisioner.playbook import ApiSettings, Target
from screens.dialogs import HostKeyDialog
from screens.step_page import StepPage
from screens.widgets.params_form import ParamsForm

AuthMethod = Literal["key file", "ssh agent"]


class ConnectForm(BaseModel):
    """What the connect page edits; turned into the playbook's `target`."""

    model_config = ConfigDict(extra="forbid")

    host: validate.HostAddress = Field(description="Node address: IP or DNS name of the Proxmox VE host.")
    ssh_port: int = Field(22, ge=1, le=65535)
    user: validate.UserName = Field("root", description="SSH user on the node.")
    auth: AuthMethod = Field("key file", description="How SSH authenticates: a private key file or the agent.")
    key_file: str | None = Field(None, description="Private key file (auth: key file).")
    known_hosts: str = Field("~/.ssh/known_hosts", description="Host keys checked on connect.")
    node: validate.HostName = Field("pve", description="Proxmox node name (as in the API).")
    api_user: validate.PveUserId = Field("root@pam", description="Proxmox API user, name@realm (devN passthrough needs root@pam).")
    api_password: secrets.SecretRef | None = Field(None, description="API password as a reference: env:NAME or file:PATH.")

    @model_validator(mode="after")
    def _key(self) -> ConnectForm:
        if self.auth == "key file" and not self.key_file:
            raise ValueError("auth 'key file' needs a key file")
        return self

    @classmethod
    def from_target(cls, target: Target) -> dict[str, object]:
        api = target.api or ApiSettings()
        return {"host": target.host, "ssh_port": target.ssh.port, "user": target.ssh.user,
                "auth": "key file" if target.ssh.key_file else "ssh agent", "key_file": target.ssh.key_file,
                "known_hosts": target.ssh.known_hosts, "node": target.node, "api_user": api.user,
                "api_password": api.password}

    def to_target(self, base: Target) -> Target:
        ssh = base.ssh.model_copy(update={"user": self.user, "port": self.ssh_port, "known_hosts": self.known_hosts,
                                          "key_file": self.key_file if self.auth == "key file" else None})
        api = (base.api or ApiSettings()).model_copy(update={"user": self.api_user, "password": self.api_password})
        return base.model_copy(update={"host": self.host, "node": self.node, "ssh": ssh, "api": api})


class ConnectPage(StepPage):
    PAGE_NAME = "connect"

    def compose_view(self) -> ComposeResult:
        yield Static("Node", classes="section")
        yield ParamsForm(ConnectForm, ConnectForm.from_target(self.session.target), key="target", id="target-form")
        yield Static("", id="hostkey", markup=False)

    @on(ParamsForm.Changed, "#target-form")
    def _target_changed(self, event: ParamsForm.Changed) -> None:
        event.stop()
        self.form_valid[-1] = not event.errors
        if not event.errors:
            form = ConnectForm.model_validate(event.values)
            before = self.session.target
            self.session.set_target(form.to_target(before))
            done = [i for i in self.indices if self.session.runs[i].status in ("ok", "changed")]
            if done and self.session.target != before:  # another node or login: connect again
                self.session.reopen(done[0])
            self.wizard.sub_title = self.session.host + ("  · LAB" if self.wizard.lab else "")
        self.refresh_controls()

    def refresh_controls(self) -> None:
        super().refresh_controls()
        if not self.form_valid.get(-1, True):
            self.query_one("#run").disabled = True

    async def before_run(self) -> bool:
        """Check the host key; on first contact the user confirms the fingerprint."""
        if self.session.node is not None or self.session.target.local:
            return True
        label = self.hostkey_label()
        try:
            fingerprint, status = await self.session.probe_host_key()
        except Exception as exc:
            self.query_one("#hostkey", Static).update(f"host key: cannot fetch ({exc})")
            return True
        if status == "known":
            self.query_one("#hostkey", Static).update(f"host key {fingerprint}: known")
            return True
        if status in ("changed", "revoked"):
            self.query_one("#hostkey", Static).update(f"HOST KEY {status.upper()}: {fingerprint} — refusing to connect")
            return True  # the connect step fails with the full warning and the fix
        dialog = HostKeyDialog(label, fingerprint, self.session.target.ssh.known_hosts)
        trusted = await self.app.push_screen_wait(dialog)
        if not trusted:
            self.query_one("#hostkey", Static).update(f"host key {fingerprint}: not trusted; not connecting")
            return False
        self.session.trust_new_host = True
        self.session.confirmed_fingerprint = fingerprint  # only this key is written to known_hosts
        self.session.node = None
        self.query_one("#hostkey", Static).update(f"host key {fingerprint}: trusted (added to known_hosts)")
        return True

    async def advance(self) -> None:
        await super().advance()
        await self.show_privileges()

    async def show_privileges(self) -> None:
        """After connecting: the PVE privileges the API user lacks, per step (`GET /access/permissions`;
        the same check `plan` and `replay` make before any change)."""
        from provisioner.steps import privilege_check

        if self.session.ctx is None or self.session.target.api is None:
            return
        playbook = self.session.playbook()
        try:
            missing = await privilege_check.missing_by_step(self.session.context(), playbook.steps)
        except Exception as exc:  # the API steps report what PVE answers
            text = f"privileges: not checked ({exc})"
        else:
            user = self.session.target.api.user
            text = privilege_check.describe(playbook.steps, missing, user) if missing else \
                f"privileges: {user} has every privilege the playbook's API steps need"
        for line in text.splitlines():
            self.log_line(line)

    def hostkey_label(self) -> str:
        t = self.session.target
        return f"{t.ssh.user}@{t.host}" + (f":{t.ssh.port}" if t.ssh.port != 22 else "")
