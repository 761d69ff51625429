"""The project cites only documents it carries: no file names a design document
outside the repository, and every `docs/design.md section N` a file cites exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
# How files used to cite the design document that lived outside the repository.
OUTSIDE = re.compile(r"\bDESIGN(?:\.md|:| sections?\b| \d)|\.\./shared/|\bSTYLE\.md\b")
CITED = re.compile(r"docs/design\.md sections? (\d+)(?:(?:,| and) (\d+))?")
TEXT = (".py", ".md", ".yaml", ".yml", ".json", ".js", ".html", ".css", ".toml", ".cfg", ".txt",
        "Makefile", ".sh")


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.splitlines()
    return [ROOT / name for name in listed
            if name.endswith(TEXT) and (ROOT / name).is_file()
            and name != "tests/test_design_citations.py"]


def test_no_file_cites_a_design_document_outside_the_repository() -> None:
    citing = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
              for path in tracked_text_files()
              for number, line in enumerate(path.read_text(encoding="utf-8",
                                                           errors="replace").splitlines(), 1)
              if OUTSIDE.search(line)]
    assert citing == [], "\n".join(citing)


def test_every_cited_section_of_docs_design_md_exists() -> None:
    sections = {int(number) for number in
                re.findall(r"^## (\d+)\. ", DESIGN.read_text(encoding="utf-8"), re.MULTILINE)}
    assert sections, "docs/design.md has no numbered sections"
    cited = {(str(path.relative_to(ROOT)), int(number))
             for path in tracked_text_files()
             for match in CITED.finditer(path.read_text(encoding="utf-8", errors="replace"))
             for number in match.groups() if number}
    assert cited, "nothing cites docs/design.md"
    missing = sorted((name, number) for name, number in cited if number not in sections)
    assert missing == [], missing
