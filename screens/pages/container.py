"""Container: the CT id and the lxc.create form (defaults from the reference playbook), existing-CT detection."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input, Label, Static

from provisioner import validate
from screens.step_page import StepPage
from screens.widgets.form_input import FormInput


class ContainerPage(StepPage):
    PAGE_NAME = "container"

    def compose_view(self) -> ComposeResult:
        ct = self.session.target.container
        with Horizontal(classes="field"):
            yield Label("container id", classes="field-label")
            yield FormInput("" if ct is None else str(ct), id="vmid", type="integer", compact=True,
                            placeholder="100–999999999")
        yield Static("", id="vmid-error", classes="field-error", markup=False)
        yield Static("", id="existing")

    @on(Input.Changed, "#vmid")
    def _vmid(self, event: Input.Changed) -> None:
        event.stop()
        error = ""
        try:
            vmid = validate.vmid(int(event.value)) if event.value.strip() else None
        except ValueError:
            error, vmid = "a container id is a whole number from 100 to 999999999", None
        if not error and vmid is None:
            error = "a container id is required"
        self.query_one("#vmid-error", Static).update(f"✗ {error}" if error else "")
        self.query_one("#vmid-error").set_class(bool(error), "shown")
        self.form_valid[-1] = not error
        if not error and vmid != self.session.target.container:
            self.session.set_target(self.session.target.model_copy(update={"container": vmid}))
            finished = [i for i in self.indices if self.session.runs[i].status in ("ok", "changed")]
            if finished:  # another container: this step and everything after it run again
                self.session.reopen(finished[0])
        self.refresh_controls()

    def refresh_controls(self) -> None:
        super().refresh_controls()
        if not self.form_valid.get(-1, True):
            self.query_one("#run").disabled = True

    def refresh_view(self) -> None:
        text = Text()
        for index in self.indices:
            run = self.session.runs[index]
            exists = [n for n in run.notes if "exists" in n] + \
                     [m for m in run.message.splitlines()[:1] if "already exists" in m]
            ct = self.session.target.container
            in_place = [c for c in run.changes if c.startswith(f"update CT {ct} in place")]
            creates = [c for c in run.changes if c.startswith(f"create CT {ct} ")]
            # the header says what the plan on screen says (never "does not exist" above an update in place)
            if run.status in ("planned", "running") and in_place:
                text.append(f"CT {ct} exists; this plan updates it in place", style="bold")
            elif run.status in ("planned", "running") and creates:
                text.append(f"CT {ct} does not exist yet; this plan creates it", style="dim")
            elif exists:
                text.append("existing container: ", style="bold")
                text.append(exists[0])
            elif self.session.state.ct_created and run.status in ("ok", "changed"):
                text.append(f"CT {ct} created by this run", style="bold")
        self.query_one("#existing", Static).update(text)
