"""One error type for bad input and faults: a single line naming the field and the fix."""

from __future__ import annotations


class ShipyardError(Exception):
    """An error a user can act on.

    ``field`` names the parameter, file or service at fault and ``fix`` says what to do.
    The CLI and the KFP step wrappers print ``str(err)`` as one line, never a traceback.
    """

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(self.one_line())

    @classmethod
    def from_line(cls, line: str) -> ShipyardError:
        """Rebuild an error from its one-line form (as it crossed a process boundary)."""
        field, _, rest = line.partition(": ")
        problem, _, fix = rest.partition(" (fix: ")
        return cls(field, problem, fix[:-1] if fix.endswith(")") else fix)

    def one_line(self) -> str:
        text = f"{self.field}: {self.problem}"
        if self.fix:
            text += f" (fix: {self.fix})"
        return " ".join(text.split())
