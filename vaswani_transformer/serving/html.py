"""LibreTranslate's `format: "html"`: the text nodes of an HTML text translated, its markup kept as it was (parsed
by Beautiful Soup with Python's own HTML parser; the serve extra).

Each text node with words is translated on its own, sentence by sentence with its own spacing, as a plain text is.
Text that is not prose is left as it is: scripts, styles, code, and every element marked `translate="no"` (HTML's
own attribute for it); comments and the doctype are not text. Attributes (alt, title) are not translated.
"""

from dataclasses import dataclass

from bs4 import BeautifulSoup, NavigableString, PageElement
from bs4.element import Comment, Declaration, Doctype, ProcessingInstruction

NOT_PROSE = {"script", "style", "code", "pre", "kbd", "samp", "var", "textarea", "template"}
NOT_TEXT = (Comment, Declaration, Doctype, ProcessingInstruction)


@dataclass
class Document:
    """An HTML text as a tree, and the text nodes of it to translate, in document order."""

    tree: BeautifulSoup
    nodes: list[NavigableString]

    @property
    def texts(self) -> list[str]:
        return [str(node) for node in self.nodes]

    def with_texts(self, translations: list[str]) -> str:
        """The document with each text node replaced by its translation, as HTML."""
        for node, translation in zip(self.nodes, translations, strict=True):
            node.replace_with(NavigableString(translation))
        return str(self.tree)


def parse(html: str) -> Document:
    """`html`'s tree and the text nodes to translate: those with a letter, outside what is not prose."""
    tree = BeautifulSoup(html, "html.parser")
    nodes = [
        node
        for node in tree.find_all(string=True)
        if not isinstance(node, NOT_TEXT) and any(c.isalpha() for c in node) and _prose(node)
    ]
    return Document(tree, nodes)


def _prose(node: PageElement) -> bool:
    return not any(
        parent.name in NOT_PROSE or str(parent.get("translate", "")).lower() == "no"
        for parent in node.parents
        if parent.name is not None
    )
