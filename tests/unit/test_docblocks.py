"""The runnable-docs reader (``testkit.docblocks``): markers, outputs, the env block, output matching;
and the trainer docs' markers read the way ``tests/e2e/test_trainer_docs.py`` runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.docblocks import DocBlockError, blocks, exports, missing_lines

ROOT = Path(__file__).resolve().parents[2]

DOC = """# Page

<!-- run: demo env -->
```bash
source .venv/bin/activate
export TOKEN=abc   # a comment
```

<!-- run: other -->
```bash
echo not mine
```

<!-- run: demo serve -->
```bash
propel serve
```

<!-- run: demo -->
```python
print("hello")
```

<!-- output: demo -->
```text
hel…
```
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_blocks_in_order_with_roles_outputs_and_lines(tmp_path: Path) -> None:
    got = blocks(_write(tmp_path, DOC), "demo")
    assert [(b.role, b.lang, b.line) for b in got] == [("env", "bash", 3), ("serve", "bash", 14), ("", "python", 19)]
    assert got[2].text == 'print("hello")' and got[2].expected == "hel…"
    assert got[0].expected is None and got[0].where == "page.md:3"
    assert exports(got[0]) == {"TOKEN": "abc"}


@pytest.mark.parametrize(("text", "says"), [
    ("<!-- run: demo -->\nno fence here\n", "must be followed by a fenced block"),
    ("<!-- output: demo -->\n```text\nx\n```\n", "must follow a run block"),
    ("<!-- run: demo daemon -->\n```bash\nx\n```\n", "role 'daemon'"),
    ("<!-- run: demo -->\n```json\n{}\n```\n", "language 'json'"),
])
def test_a_marker_that_does_not_introduce_a_block_names_its_line(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(DocBlockError, match=says) as err:
        blocks(_write(tmp_path, "intro\n\n" + text), "demo")
    assert "page.md:3" in str(err.value)


def test_an_env_block_holds_only_exports(tmp_path: Path) -> None:
    [env] = blocks(_write(tmp_path, "<!-- run: demo env -->\n```bash\nexport A=1\ncd /tmp\n```\n"), "demo")
    with pytest.raises(DocBlockError, match="only `export NAME=VALUE`"):
        exports(env)


def test_expected_lines_match_in_order_with_ellipsis_as_any_text() -> None:
    actual = "served mix: 12 task(s)\n\n  states: acked 12 (100%)\n  topics: mul:6 3 (25%)\nNaN\n"
    assert missing_lines("served mix: … task(s)\n…\n  topics: …\nNaN", actual) == []
    assert missing_lines("  topics: …\nserved mix: …", actual) == ["served mix: …"]  # order matters
    assert missing_lines("states: acked 13 (100%)", actual) == ["states: acked 13 (100%)"]
    assert missing_lines("topics", actual) == ["topics"]  # a whole line, not a part of one


def test_the_trainer_docs_read_as_the_e2e_test_runs_them() -> None:
    todo = [b for path in (ROOT / "docs" / "QUEUE.md", ROOT / "README.md") for b in blocks(path, "trainer-docs")]
    roles = [b.role for b in todo]
    assert roles[0] == "env" and roles.count("serve") == 1 and "" in roles[roles.index("serve"):]
    assert "PROPEL_API_TOKEN" in exports(todo[0])
    assert sum(b.expected is not None for b in todo) >= 6
    assert {b.path.name for b in todo} == {"QUEUE.md", "README.md"}
