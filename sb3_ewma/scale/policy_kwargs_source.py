"""Reading and editing a ``policy_kwargs`` string of an rl-zoo3 entry without evaluating it."""

import ast


class PolicyKwargsSource:
    """
    Parse a ``policy_kwargs`` string (``dict(...)`` or ``{...}``) without evaluating it (rl-zoo3 evaluates it later, in
    its own namespace), and edit it so that everything not edited keeps its original spelling.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        # parenthesized so that leading whitespace and line breaks are allowed, as in ``eval``
        wrapped = "(" + source + "\n)"
        try:
            self.tree: ast.expr | None = ast.parse(wrapped, mode="eval").body
        except SyntaxError:
            self.tree = None
        self._line_starts = [0]
        for line in wrapped.encode("utf-8").splitlines(keepends=True):
            self._line_starts.append(self._line_starts[-1] + len(line))

    @staticmethod
    def items(node: ast.expr | None) -> dict[str, ast.expr] | None:
        """Keyword -> value node of a ``dict(k=v, ...)`` call or a ``{"k": v, ...}`` display, else ``None``."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
            return {keyword.arg: keyword.value for keyword in node.keywords if keyword.arg is not None}
        if isinstance(node, ast.Dict):
            return {
                key.value: value
                for key, value in zip(node.keys, node.values)
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
            }
        return None

    def _offset(self, lineno: int, col_offset: int) -> int:
        # byte offset in the original source (the wrapped one starts with "(")
        return self._line_starts[lineno - 1] + col_offset - 1

    def _splice(self, start: int, end: int, text: str) -> str:
        original = self.source.encode("utf-8")
        return (original[:start] + text.encode("utf-8") + original[end:]).decode("utf-8")

    def replace(self, node: ast.expr, text: str) -> str:
        """The source with ``node`` replaced by ``text``."""
        assert node.end_lineno is not None and node.end_col_offset is not None
        start = self._offset(node.lineno, node.col_offset)
        end = self._offset(node.end_lineno, node.end_col_offset)
        return self._splice(start, end, text)

    def add_item(self, container: ast.expr, key: str, value_text: str) -> str:
        """The source with ``key=value`` or ``"key": value`` added to ``container``."""
        item = f"{key}={value_text}" if isinstance(container, ast.Call) else f"{key!r}: {value_text}"
        elements: list[ast.expr | ast.keyword] = []
        if isinstance(container, ast.Call):
            elements = [*container.args, *container.keywords]
        elif isinstance(container, ast.Dict):
            elements = list(container.values)
        if elements:
            last = max(elements, key=lambda element: (element.end_lineno or 0, element.end_col_offset or 0))
            assert last.end_lineno is not None and last.end_col_offset is not None
            position = self._offset(last.end_lineno, last.end_col_offset)
            return self._splice(position, position, f", {item}")
        # empty: insert just before the closing ")" or "}"
        assert container.end_lineno is not None and container.end_col_offset is not None
        position = self._offset(container.end_lineno, container.end_col_offset) - 1
        return self._splice(position, position, item)


def dotted_name(node: ast.expr) -> str | None:
    """The last part of a name (``th.optim.SGD`` -> ``"SGD"``, also in a string), or None."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.rsplit(".", 1)[-1]
    return None
