"""Debian packages for the ARM benchmark, fetched with the system's own apt-get but into a private
apt state in the cache folder: the system's sources and keys, other architectures (arm64) and
source packages, and nothing installed, nor any of the system's apt files changed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


class ArmBenchError(Exception):
    """A problem the benchmark reports as one line (what failed and what to install or do)."""


def cache_root() -> Path:
    """Where everything the ARM benchmark downloads or builds lives: $AOT_ARM_CACHE, else
    ~/.cache/aot-bench-arm. Never inside the repository."""
    env = os.environ.get("AOT_ARM_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "aot-bench-arm"
    root.mkdir(parents=True, exist_ok=True)
    return root


@dataclass(frozen=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str | None


def _deb822_sources(text: str) -> list[AptSource]:
    sources = []
    for paragraph in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            sources.append(AptSource(uri, tuple(fields.get("suites", "").split()),
                                     tuple(fields.get("components", "").split()), fields.get("signed-by")))
    return sources


def _one_line_sources(text: str) -> list[AptSource]:
    sources = []
    for line in text.splitlines():
        match = re.match(r"\s*deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s*(.*)", line)
        if match:
            options = match.group(1) or ""
            signed = re.search(r"signed-by=(\S+?)[\s\]]", options)
            sources.append(AptSource(match.group(2), (match.group(3),), tuple(match.group(4).split()),
                                     signed.group(1) if signed else None))
    return sources


def system_sources(etc: Path = Path("/etc/apt")) -> list[AptSource]:
    """The system's binary package sources (the same mirrors serve the source packages)."""
    sources: list[AptSource] = []
    listing = etc / "sources.list"
    if listing.is_file():
        sources += _one_line_sources(listing.read_text())
    parts = etc / "sources.list.d"
    for path in sorted(parts.glob("*.list")) if parts.is_dir() else []:
        sources += _one_line_sources(path.read_text())
    for path in sorted(parts.glob("*.sources")) if parts.is_dir() else []:
        sources += _deb822_sources(path.read_text())
    return sources


class PrivateApt:
    """apt-get with its lists, caches and status in `root` (the system's are left alone)."""

    def __init__(self, root: Path, architecture: str) -> None:
        self.root = root
        self.architecture = architecture
        if shutil.which("apt-get") is None:
            raise ArmBenchError("apt-get not found: the ARM benchmark fetches Debian packages with it "
                                "(run it on Debian or Ubuntu)")
        for sub in ("lists/partial", "archives/partial", "parts", "preferences"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "status").touch()

    def _options(self) -> list[str]:
        r = self.root
        return ["-q", "-o", f"Dir::Etc::SourceList={r / 'sources.list'}", "-o", f"Dir::Etc::SourceParts={r / 'parts'}",
                "-o", f"Dir::Etc::PreferencesParts={r / 'preferences'}", "-o", f"Dir::State::Lists={r / 'lists'}",
                "-o", f"Dir::State::status={r / 'status'}", "-o", f"Dir::Cache={r}",
                "-o", f"APT::Architecture={self.architecture}", "-o", f"APT::Architectures={self.architecture}",
                "-o", "APT::Sandbox::User=root" if os.geteuid() == 0 else "Debug::NoLocking=1"]

    def _run(self, args: list[str], cwd: Path | None = None) -> str:
        result = subprocess.run(["apt-get", *self._options(), *args], cwd=cwd, capture_output=True, text=True)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise ArmBenchError(f"apt-get {' '.join(args)} failed: {last}")
        return result.stdout

    def update(self) -> None:
        """Fetch the package lists once (again only when the sources changed)."""
        sources = system_sources()
        if not sources:
            raise ArmBenchError("no apt sources in /etc/apt: cannot fetch Debian packages")
        lines = []
        for s in sources:
            options = f"arch={self.architecture}" + (f" signed-by={s.signed_by}" if s.signed_by else "")
            for suite in s.suites:
                for kind in ("deb", "deb-src"):
                    lines.append(f"{kind} [{options}] {s.uri} {suite} {' '.join(s.components)}")
        text = "\n".join(lines) + "\n"
        listing = self.root / "sources.list"
        stamp = self.root / "lists" / ".updated"
        if listing.is_file() and listing.read_text() == text and stamp.is_file():
            return
        listing.write_text(text)
        self._run(["update"])
        stamp.touch()

    def download(self, packages: list[str], dest: Path) -> list[Path]:
        """The .deb files of `packages` for this architecture, downloaded into `dest` once."""
        dest.mkdir(parents=True, exist_ok=True)
        missing = [p for p in packages if not list(dest.glob(f"{p}_*.deb"))]
        if missing:
            self.update()
            self._run(["download", *missing], cwd=dest)
        return sorted(d for p in packages for d in dest.glob(f"{p}_*.deb"))

    def source(self, package: str, version: str, dest: Path) -> list[Path]:
        """The files of source package `package` at `version` (.dsc, .orig and .debian tarballs)."""
        dest.mkdir(parents=True, exist_ok=True)
        upstream = version.split(":", 1)[-1].rsplit("-", 1)[0]
        found = sorted(dest.glob(f"{package}_{upstream}*.orig.tar.*"))
        if not found:
            self.update()
            self._run(["source", "--download-only", f"{package}={version}"], cwd=dest)
            found = sorted(dest.glob(f"{package}_{upstream}*.orig.tar.*"))
        return found
