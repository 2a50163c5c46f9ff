"""Vendor the front-end files Berth serves, and the tests' axe-core: nothing is fetched at run time.

    python scripts/vendor.py          fetch the pinned packages with `npm pack` and copy their files
    python scripts/vendor.py --check  compare the files on disk with static/vendor/VERSIONS.json

Only the npm registry is needed (through the npm client); the standard library does the rest.
To upgrade a package, change its pin below, run the script, and commit the files with VERSIONS.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "static" / "vendor"  # served to every browser
TEST_VENDOR = ROOT / "tests" / "e2e" / "vendor"  # read by the browser tests only, never served
VERSIONS = VENDOR / "VERSIONS.json"

# name -> (exact version, {path inside the package: where it goes})
PACKAGES: dict[str, tuple[str, dict[str, Path]]] = {
    "htmx.org": ("2.0.11", {"dist/htmx.min.js": VENDOR / "htmx.min.js"}),
    "htmx-ext-ws": ("2.0.4", {"ws.js": VENDOR / "htmx-ext-ws.js"}),
    "@picocss/pico": ("2.1.1", {"css/pico.min.css": VENDOR / "pico.min.css"}),
    # The usage page's charts (canvas; no eval and no inline style, as the CSP requires).
    "chart.js": ("4.5.1", {"dist/chart.umd.min.js": VENDOR / "chart.umd.min.js"}),
    # The accessibility engine tests/e2e/test_accessibility.py injects into each page. Tests only:
    # under static/ it would be collected and served to every user, for nothing.
    "axe-core": ("4.14.1", {"axe.min.js": TEST_VENDOR / "axe.min.js"}),
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def npm_pack(name: str, version: str, into: Path) -> dict[str, str]:
    """Download one package tarball into `into`; return npm's description of it."""
    out = subprocess.run(
        ["npm", "pack", f"{name}@{version}", "--json", "--pack-destination", str(into)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    info: dict[str, str] = json.loads(out)[0]
    if info["version"] != version:  # npm resolved something other than the exact pin
        raise SystemExit(f"{name}: asked for {version}, npm returned {info['version']}")
    return info


def extract(tarball: Path, files: dict[str, Path]) -> list[dict[str, str]]:
    """Copy the named members (npm tarballs keep them under package/) where PACKAGES says."""
    written = []
    with tarfile.open(tarball) as tar:
        for source, target in files.items():
            member = tar.extractfile(f"package/{source}")
            if member is None:
                raise SystemExit(f"{tarball.name}: {source} is not a regular file")
            dest = target
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(member.read())
            rel = dest.relative_to(ROOT).as_posix()
            written.append({"source": source, "path": rel, "sha256": sha256(dest)})
    return written


def vendor() -> None:
    VENDOR.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (version, files) in PACKAGES.items():
            info = npm_pack(name, version, Path(tmp))
            written = extract(Path(tmp) / info["filename"], files)
            records.append(
                {
                    "name": name,
                    "version": version,
                    "integrity": info["integrity"],
                    "files": written,
                }
            )
            print(f"vendored {name}@{version}")
    VERSIONS.write_text(json.dumps({"packages": records}, indent=2) + "\n")


def check() -> int:
    """Return 0 when every recorded file matches its hash and the pins above, else 1."""
    if not VERSIONS.exists():
        print(f"{VERSIONS.relative_to(ROOT)} is missing; run python scripts/vendor.py")
        return 1
    recorded = json.loads(VERSIONS.read_text())["packages"]
    pinned = {name: version for name, (version, _) in PACKAGES.items()}
    if {p["name"]: p["version"] for p in recorded} != pinned:
        print(
            "VERSIONS.json does not match the pins in scripts/vendor.py; "
            "run python scripts/vendor.py"
        )
        return 1
    for package in recorded:
        for file in package["files"]:
            path = ROOT / file["path"]
            if not path.is_file() or sha256(path) != file["sha256"]:
                print(
                    f"{file['path']} differs from VERSIONS.json "
                    f"({package['name']}@{package['version']})"
                )
                return 1
    print(f"vendored files match VERSIONS.json ({len(recorded)} packages)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="verify files on disk against VERSIONS.json",
    )
    if parser.parse_args().check:
        return check()
    vendor()
    return 0


if __name__ == "__main__":
    sys.exit(main())
