"""The vendored front-end files match their manifest (scripts/vendor_admin.py --check)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _script():
    spec = importlib.util.spec_from_file_location("vendor_admin", ROOT / "scripts/vendor_admin.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_vendored_files_match_the_manifest() -> None:
    assert _script().check() == []


def test_manifest_names_package_version_license_and_hash() -> None:
    files = json.loads(_script().MANIFEST.read_text())["files"]
    assert "alpine-csp.esm.min.js" in files and "uPlot.iife.min.js" in files
    for entry in files.values():
        assert entry["package"] and entry["version"] and entry["license"]
        assert len(entry["sha256"]) == 64


def test_a_changed_file_is_caught(tmp_path, monkeypatch) -> None:
    script = _script()
    copy = tmp_path / "vendor"
    import shutil

    shutil.copytree(script.VENDOR, copy)
    (copy / "marked.esm.js").write_text("tampered")
    monkeypatch.setattr(script, "VENDOR", copy)
    monkeypatch.setattr(script, "MANIFEST", copy / "manifest.json")
    (copy / "extra.js").write_text("")
    assert script.check() == ["changed: marked.esm.js", "not in manifest: extra.js"]
