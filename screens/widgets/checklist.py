"""A checklist whose checked and unchecked lines differ in their glyph, not only in colour: `[x]` / `[ ]`
(readable under NO_COLOR, on a monochrome terminal and in a screenshot)."""

from __future__ import annotations

from typing import TypeVar

from rich.segment import Segment
from textual.strip import Strip
from textual.widgets import SelectionList
from textual.widgets._toggle_button import ToggleButton

ValueT = TypeVar("ValueT")

CHECKED, UNCHECKED = "[x]", "[ ]"
#: the button SelectionList draws: its three cells are replaced by one of the glyphs above (same width)
_BUTTON = ToggleButton.BUTTON_LEFT + ToggleButton.BUTTON_INNER + ToggleButton.BUTTON_RIGHT


class Checklist(SelectionList[ValueT]):
    """`SelectionList` with distinct glyphs for checked and unchecked options."""

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        segments = list(strip)
        if len(segments) < 3 or "".join(s.text for s in segments[:3]) != _BUTTON:
            return strip  # a line without a button (past the last option)
        _, scroll_y = self.scroll_offset
        selected = self.get_option_at_index(scroll_y + y).value in self._selected
        glyph = CHECKED if selected else UNCHECKED
        style = segments[1].style
        return Strip([Segment(glyph, style), *segments[3:]], strip.cell_length)
