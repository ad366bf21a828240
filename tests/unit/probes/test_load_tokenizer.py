"""A saved char-level tiny model's tokenizer loads back as it was saved: transformers 5's ``AutoTokenizer``
re-derives a Qwen2 byte-level tokenizer from the model type and drops every space (``"BUG: six "`` became
``"BUG:six"``, unlike the pretraining sequences); the generator, the reference and the bootstrap load it
with :func:`probes.reference.load_tokenizer`."""

from __future__ import annotations

from pathlib import Path

from curriculum.common.tinymodels import build_char_tokenizer, save_tiny, tiny_qwen2
from curriculum.rl.bootstrap import load_bootstrapped
from curriculum.rl.model import load_base
from probes.reference import FrozenReference, load_tokenizer

TEXT = "BUG: six six.py::with_metaclass compare_flip 0"


def test_saved_char_tokenizer_keeps_spaces_everywhere_it_is_loaded(tmp_path: Path) -> None:
    built = build_char_tokenizer()
    path = save_tiny(tiny_qwen2(built, hidden_size=32, num_layers=1, seed=0), built, tmp_path / "tiny")
    want = built(TEXT, add_special_tokens=False)["input_ids"]
    assert built.convert_tokens_to_ids(" ") in want and len(want) == len(TEXT)
    loaded = [load_tokenizer(str(path)), FrozenReference.load(str(path)).tokenizer, load_base(str(path))[1],
              load_bootstrapped(path)[1]]
    for tok in loaded:
        assert tok([TEXT], return_tensors="pt", add_special_tokens=False)["input_ids"][0].tolist() == want
        assert tok.decode(want) == TEXT
        assert (tok.pad_token_id, tok.eos_token_id) == (built.pad_token_id, built.eos_token_id)
