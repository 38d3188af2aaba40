"""An effect's recovery contract — ``E_NO_RECOVERY``."""

from __future__ import annotations

from dmn.interpreter.checker.program_state import _ProgramBase
from dmn.interpreter.diagnostics import Code
from dmn.interpreter.documents import Effect
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import Reversibility


class _RecoveryChecks(_ProgramBase):
    """The cleanup/recovery contract of one effect."""

    def check_recovery(self, i: int, effect: Effect, spec: OpcodeSpec) -> None:
        supported = ", ".join(sorted(s.value for s in spec.recovery)) or "none"
        if not spec.recovery:
            self.error(
                Code.E_NO_RECOVERY,
                f"{spec.name} declares no recovery strategy; it cannot be run safely",
                "effects",
                i,
                "kind",
            )
            return
        if effect.recovery is None:
            if spec.reversibility is Reversibility.IRREVERSIBLE:
                self.error(
                    Code.E_NO_RECOVERY,
                    f"{spec.name} is irreversible: declare recovery.strategy "
                    f"(supported: {supported})",
                    "effects",
                    i,
                    "kind",
                )
            return
        if effect.recovery.strategy not in {s.value for s in spec.recovery}:
            self.error(
                Code.E_NO_RECOVERY,
                f"{spec.name} does not support recovery {effect.recovery.strategy!r} "
                f"(supported: {supported})",
                "effects",
                i,
                "recovery",
                "strategy",
            )
