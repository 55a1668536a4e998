"""One raw setting's value checked and converted, and "did you mean" for near misses.

A raw value comes from the TOML file, an environment variable (text) or a flag; each
converter takes the label the user knows it by (``--receive-timeout``,
``WALCAST__SOURCE__SLOT``, ``walcast.toml: source.slot``) and raises a
:class:`~capture.errors.ConfigError` whose message starts with it, so the line names the
setting as it was given. Nothing here knows about layers or precedence
(:mod:`capture.config.reading`).
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from capture import dsn as dsn_util
from capture.config.settings import BY_NAME, BY_SECTION, DEPRECATED, SECTIONS, Kind, Setting
from capture.errors import ConfigError
from capture.sinks.topics import LEGAL_TOPIC, validate_template

SUGGEST_CUTOFF: Final = 0.75
"""How close (difflib's ratio) a name must be to a known one to be suggested."""

# -- suggestions -----------------------------------------------------------------------------


def suggestion(word: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``word`` if it is a near miss (difflib), else None."""
    found = difflib.get_close_matches(word, list(known), n=1, cutoff=SUGGEST_CUTOFF)
    return found[0] if found else None


def did_you_mean(found: str | None) -> str:
    """``; did you mean <found>?`` to end an error line, or nothing when ``found`` is None."""
    return f"; did you mean {found}?" if found else ""


def key_suggestion(section: str, key: str) -> str | None:
    """A known ``section.key`` for an unknown one.

    The section's own keys first, then the same key in another section, then a near miss
    among every setting's and every old name.
    """
    own = suggestion(key, BY_SECTION.get(section, {}))
    if own is not None:
        return f"{section}.{own}"
    for other in SECTIONS:
        if key in BY_SECTION[other]:
            return f"{other}.{key}"
    return suggestion(f"{section}.{key}", [*BY_NAME, *DEPRECATED])


def format_setting_suggestion(fmt: str, settings: Mapping[str, Any]) -> str:
    """A suggestion for the first key of ``settings`` that format ``fmt`` does not have."""
    import dataclasses  # noqa: PLC0415

    from capture.formats import format_class  # noqa: PLC0415
    from capture.formats.settings import prefixes  # noqa: PLC0415

    cls = format_class(fmt).settings_class
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    own = prefixes(fmt)
    for key in settings:
        prefix, dot, name = str(key).partition(".")
        if dot and prefix in own and name not in names:
            found = suggestion(name, names)
            return did_you_mean(f"{fmt}.{found}" if found else None)
    return ""


def read_toml(path: str) -> dict[str, Any]:
    """The TOML file at ``path``; one :class:`ConfigError` line when it cannot be read."""
    try:
        with Path(path).open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"--config: file {path!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"--config: {path!r} is a directory, not a TOML file") from None
    except PermissionError:
        raise ConfigError(f"--config: cannot read {path!r} (permission denied)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config: {path!r} is not valid TOML: {exc}") from None


# -- validation of one value ---------------------------------------------------------------


def _bool(value: Any, setting: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{setting}: {value!r} is not a boolean (true/false)")


def _number(
    value: Any,
    setting: str,
    *,
    minimum: float | None = 0.0,
    maximum: float | None = None,
    integer: bool = False,
) -> Any:
    if isinstance(value, bool):
        value = str(value).lower()  # true is not 1 here
    try:
        number = int(value) if integer else float(value)
    except (TypeError, ValueError, OverflowError):
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{setting}: {value!r} is not {kind}") from None
    if number != number:  # noqa: PLR0124 - NaN
        raise ConfigError(f"{setting}: {value!r} is not a number")
    if minimum is not None and number < minimum:
        raise ConfigError(f"{setting}: {value!r} must be at least {minimum:g}")
    if maximum is not None and number > maximum:
        raise ConfigError(f"{setting}: {value!r} must be at most {maximum:g}")
    return number


def _list(value: Any, setting: str) -> list[str]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, list):
        items = [str(v).strip() for v in value]
    else:
        raise ConfigError(f"{setting}: expected a list of names, got {value!r}")
    return [i for i in items if i]


def _table(value: Any, setting: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{setting}: must be a table of settings")
    for key, item in value.items():
        if isinstance(item, Mapping | list):
            raise ConfigError(f"{setting}.{key}: must be a single value, not {item!r}")
    return {str(k): scalar_text(v) for k, v in value.items()}


def scalar_text(value: Any) -> str:
    """A TOML scalar as the text librdkafka and format settings take (``true``, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _topic(value: Any, setting: Setting, label: str) -> str:
    text = str(value)
    if text == "" and setting.empty_disables:
        return text
    if not LEGAL_TOPIC.match(text) or not text.strip("."):
        raise ConfigError(
            f"{label}: {text!r} is not a legal Kafka topic name (letters, digits, "
            "'.', '_', '-'; at most 249)"
        )
    return text


def _choice(setting: Setting, value: Any, label: str) -> str:
    text = str(value)
    if text in setting.choices:
        return text
    if setting.key == "format":
        found = suggestion(text, setting.choices)
        raise ConfigError(
            f"{label}: unknown format {value!r}; valid formats: "
            + ", ".join(setting.choices)
            + did_you_mean(found)
        )
    found = suggestion(text, setting.choices)
    raise ConfigError(
        f"{label}: {value!r} is not one of {', '.join(setting.choices)}{did_you_mean(found)}"
    )


def convert(setting: Setting, value: Any, name: str) -> Any:
    """``value`` checked and converted as ``setting`` says (``name``: for messages)."""
    kind = setting.kind
    if kind is Kind.BOOL:
        return _bool(value, name)
    if kind in (Kind.INT, Kind.NUMBER):
        return _number(
            value,
            name,
            minimum=setting.minimum,
            maximum=setting.maximum,
            integer=kind is Kind.INT,
        )
    if kind is Kind.LIST:
        return _list(value, name)
    if kind is Kind.CHOICE:
        return _choice(setting, value, name)
    if kind is Kind.TOPIC:
        return _topic(value, setting, name)
    if kind is Kind.TEMPLATE:
        return validate_template(str(value), name)
    if kind is Kind.TABLE:
        return _table(value, name)
    if kind is Kind.AUTO_BOOL:
        if not isinstance(value, bool) and str(value).strip().lower() in ("auto", ""):
            return None
        try:
            return _bool(value, name)
        except ConfigError:
            raise ConfigError(f"{name}: {value!r} is not true, false or auto") from None
    if kind is Kind.DSN:
        text = str(value)
        dsn_util.parse(text, setting=name)
        return text
    if isinstance(value, Mapping | list):
        raise ConfigError(f"{name}: expected a single value, got {type(value).__name__}")
    return str(value)
