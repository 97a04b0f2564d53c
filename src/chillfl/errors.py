"""User-facing errors.

Every mistake a user can make in a config or on the command line raises
:class:`ConfigError`; the CLI turns it into one line on stderr and exit status 2.
Keeping one exception type means library code never prints or exits itself.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad user-supplied value: names the field and what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


def choice_error(field: str, value: object, allowed: "list[str] | tuple[str, ...]") -> ConfigError:
    """Error for an unknown name, listing the valid ones."""
    return ConfigError(field, f"unknown value {value!r}; allowed: {', '.join(sorted(allowed))}")
