"""Re-vendor the admin's front-end libraries from the npm registry, and check them.

    python scripts/vendor_admin.py            # fetch with `npm pack`, copy, rewrite the manifest
    python scripts/vendor_admin.py --check    # hash the vendored files against the manifest

The admin (omlx/server/admin) has no build step and fetches nothing at run time: the files
below are copied verbatim from the published packages into static/vendor/, and
static/vendor/manifest.json records each file's package, version, license and sha256.
To move a library to a new version, change PACKAGES and run this script; review the diff.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "omlx" / "server" / "admin" / "static" / "vendor"
MANIFEST = VENDOR / "manifest.json"

HLJS_LANGUAGES = (
    "bash", "c", "cpp", "css", "diff", "go", "java", "javascript", "json", "markdown",
    "plaintext", "python", "rust", "shell", "sql", "typescript", "xml", "yaml",
)  # fmt: skip

# name, version, {path in the package: path under static/vendor}
PACKAGES: list[tuple[str, str, dict[str, str]]] = [
    # Alpine's CSP build: no eval, so the admin's Content-Security-Policy forbids it.
    ("@alpinejs/csp", "3.17.4", {"dist/module.esm.min.js": "alpine-csp.esm.min.js"}),
    (
        "uplot",
        "1.6.32",
        {
            "dist/uPlot.iife.min.js": "uPlot.iife.min.js",
            "dist/uPlot.min.css": "uPlot.min.css",
            "LICENSE": "licenses/uplot.txt",
        },
    ),
    ("marked", "18.3.0", {"lib/marked.esm.js": "marked.esm.js", "LICENSE": "licenses/marked.txt"}),
    (
        "dompurify",
        "3.5.0",
        {"dist/purify.min.js": "purify.min.js", "LICENSE": "licenses/dompurify.txt"},
    ),
    (
        "@highlightjs/cdn-assets",
        "11.12.0",
        {
            "es/core.min.js": "hljs/core.min.js",
            "LICENSE": "licenses/highlightjs.txt",
            **{f"es/languages/{x}.min.js": f"hljs/languages/{x}.min.js" for x in HLJS_LANGUAGES},
        },
    ),
]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(name: str, version: str, workdir: Path) -> tuple[Path, dict]:
    """`npm pack name@version` into workdir; the unpacked package folder and package.json."""
    out = subprocess.run(
        ["npm", "pack", f"{name}@{version}", "--silent", "--pack-destination", str(workdir)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    tgz = workdir / out.stdout.strip().splitlines()[-1]
    dest = workdir / tgz.stem
    with tarfile.open(tgz) as tar:
        tar.extractall(dest, filter="data")
    package = dest / "package"
    return package, json.loads((package / "package.json").read_text())


def vendor() -> None:
    if VENDOR.exists():
        shutil.rmtree(VENDOR)
    files: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, version, mapping in PACKAGES:
            package, meta = fetch(name, version, Path(tmp))
            if meta["version"] != version:
                raise SystemExit(f"{name}: asked for {version}, got {meta['version']}")
            for src, dst in mapping.items():
                target = VENDOR / dst
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(package / src, target)
                files[dst] = {
                    "package": name,
                    "version": version,
                    "license": meta.get("license", ""),
                    "source": src,
                    "sha256": sha256(target),
                }
    MANIFEST.write_text(json.dumps({"files": files}, indent=2, sort_keys=True) + "\n")
    print(f"vendored {len(files)} files into {VENDOR.relative_to(ROOT)}")


def check() -> list[str]:
    """Problems: files missing, changed, or present but not in the manifest."""
    manifest = json.loads(MANIFEST.read_text())["files"]
    problems = []
    for rel, entry in manifest.items():
        path = VENDOR / rel
        if not path.is_file():
            problems.append(f"missing: {rel}")
        elif sha256(path) != entry["sha256"]:
            problems.append(f"changed: {rel}")
    on_disk = {p.relative_to(VENDOR).as_posix() for p in VENDOR.rglob("*") if p.is_file()}
    problems += [f"not in manifest: {rel}" for rel in sorted(on_disk - set(manifest))
                 if rel != "manifest.json"]  # fmt: skip
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify hashes; fetch nothing")
    if parser.parse_args().check:
        problems = check()
        print("\n".join(problems) or "vendored files match the manifest")
        return 1 if problems else 0
    vendor()
    return 0


if __name__ == "__main__":
    sys.exit(main())
