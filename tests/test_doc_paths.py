"""Every path the contributor and user documents name exists.

The documents (:data:`DOCUMENTS`) name files and folders in inline code (```capture/pump.py```)
and in links (``[ADR 0001](docs/adr/0001-exactly-once.md)``). What counts as a path, decided
here because the documents also hold LSNs (``0/16B3F48``), images (``apache/kafka``) and
patterns (``formats/<vendor>.py``):

* a token with a ``/`` is a path when its first part is a file or folder of the repository
  or of the document's folder; it must then exist, from the root or from that folder;
* a token without a ``/`` is a path when it ends in a file extension of :data:`EXTENSIONS`;
  a bare name like this is the shorthand of a table row or a sentence that names its
  folder, so it must exist in a folder named on the same line, in the document's folder,
  at the root, or in one of :data:`FOLDERS`;
* a token with ``<``, ``>``, ``{``, ``}`` or ``*`` is a pattern, not a path; a URL and an
  ``#anchor`` are not paths either.

A document that is not there (``DEVELOPMENT.md`` before it is written) is skipped; one of
them missing is not a failure of this test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = (
    "README.md",
    "ARCHITECTURE.md",
    "pipeline/README.md",
    "bench/README.md",
    "DEVELOPMENT.md",
)
EXTENSIONS = frozenset({"py", "md", "json", "avsc", "toml", "sh", "yml", "yaml", "cfg", "ini"})
FOLDERS = ("capture", "pipeline", "schemas", "bench", "tests", "scripts")
_CODE = re.compile(r"`([^`\s]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_PATHLIKE = re.compile(r"^[\w.-]+(?:/[\w.-]*)*$")


def named_paths(text: str) -> list[tuple[int, str, list[str]]]:
    """(line, token, folders named on that line) for every path-like token of ``text``."""
    found: list[tuple[int, str, list[str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        tokens = [m.group(1) for m in _CODE.finditer(line)]
        tokens += [m.group(1).partition("#")[0] for m in _LINK.finditer(line)]
        tokens = [t.rstrip(".,:;") for t in tokens if t and "://" not in t]
        tokens = [t for t in tokens if _PATHLIKE.match(t)]
        folders = [t.rsplit("/", 1)[0] for t in tokens if "/" in t]
        found.extend((number, token, folders) for token in tokens)
    return found


def missing(document: Path, root: Path = ROOT) -> list[str]:
    """The paths ``document`` names that do not exist under ``root``, as ``file:line: path``."""
    here = document.parent
    problems = []
    for number, token, folders in named_paths(document.read_text(encoding="utf-8")):
        if "/" in token:
            first = token.split("/", 1)[0]
            if not ((root / first).exists() or (here / first).exists()):
                continue  # not a path of this repository (an LSN, an image name)
            exists = (root / token).exists() or (here / token).exists()
        else:
            if token.rsplit(".", 1)[-1] not in EXTENSIONS or "." not in token:
                continue
            places = [root / f for f in folders] + [here / f for f in folders]
            places += [here, root] + [root / f for f in FOLDERS]
            exists = any((place / token).exists() for place in places)
        if not exists:
            problems.append(f"{document.relative_to(root)}:{number}: {token}")
    return problems


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_path_a_document_names_exists(name: str) -> None:
    document = ROOT / name
    if not document.exists():
        return  # DEVELOPMENT.md may not be written yet
    problems = missing(document)
    assert not problems, "paths named in the documents that do not exist:\n" + "\n".join(problems)


def test_a_missing_path_is_found(tmp_path: Path) -> None:
    (tmp_path / "capture").mkdir()
    (tmp_path / "capture" / "pump.py").write_text("")
    document = tmp_path / "doc.md"
    document.write_text(
        "`capture/pump.py` and `capture/gone.py`; LSN `0/16B3F48`, image `apache/kafka`,\n"
        "pattern `capture/<vendor>.py`, [link](capture/pump.py#top), [web](https://x.org/a.md)\n"
        "| `capture/` | `pump.py`, `lost.py` |\n"
    )
    assert missing(document, tmp_path) == ["doc.md:1: capture/gone.py", "doc.md:3: lost.py"]
