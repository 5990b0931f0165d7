"""A text input that applies every key in the order it was typed.

Textual's `Input` inserts printable characters in its own key handler, but its editing keys
(backspace, delete, cursor moves) are bindings: the key event bubbles up through every ancestor's
message queue before the binding runs, while the next characters are already being inserted. A
burst of keys (fast typing, a paste through the terminal, a loaded machine) is then applied out of
order: 30 Backspaces followed by `127.0.0.1` deleted the new characters instead of the old ones.
`FormInput` runs its own bindings from the key handler, so the key order is the edit order.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class FormInput(Input):
    """`Input` whose editing keys take effect in arrival order (no key is lost or reordered)."""

    async def _on_key(self, event: events.Key) -> None:
        if not event.is_printable:
            for key in event.aliases:
                bindings = self._bindings.key_to_bindings.get(key, ())
                if bindings:
                    event.stop()
                    event.prevent_default()
                    self._restart_blink()
                    await self.run_action(bindings[0].action)
                    return
        await super()._on_key(event)
