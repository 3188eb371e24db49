"""No comment, docstring, doc or test cites a section of SPEC.md: that
document is not shipped, so a citation points nowhere.  State the fact."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
FOLDERS = ("csrc", "include", "torch_plugin", "tests", "docs", "benchmarks", "examples", "scripts")
SUFFIXES = {".c", ".h", ".cpp", ".hpp", ".py", ".md", ".sh", ".txt", ".build"}
CITATION = re.compile(r"\bSPEC(?:'s\b|\s+(?:section\s+)?\d)")


def _files():
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES:
                yield path
    yield ROOT / "README.md"


def test_no_file_cites_a_spec_section():
    hits = []
    for path in _files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if CITATION.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_the_pattern_catches_citations():
    name = "SP" + "EC"  # split so that this file does not cite itself
    for text in (f"({name} 3.12)", f"{name} 2.3-2.7", f"{name}'s message", f"{name} section 4"):
        assert CITATION.search(text), text
    assert not CITATION.search("SPEC_CAP SPECIAL")
