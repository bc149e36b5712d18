"""The command-line options the commands share (typer annotations; no logic)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cudaredist.profiles import DEFAULT_PROFILE

Train = Annotated[str, typer.Argument(help="CUDA train (13.4 = newest 13.4.x; 13 = newest 13.x) "
                                           "or exact release (13.4.1).")]
PlatformOpt = Annotated[str | None, typer.Option(
    "--platform", "-p", help="Target platform (linux-x86_64, linux-sbsa, windows-x86_64, "
                             "windows-arm64). Default: this host's.")]
ProfileOpt = Annotated[str | None, typer.Option(
    "--profile", show_default=False,
    help="Component profile: nvcc, runtime, build, torch (`cudaredist profiles` lists them).  "
         f"[default: {DEFAULT_PROFILE}]")]
ComponentOpt = Annotated[list[str] | None, typer.Option(
    "--component", "-c", help="Add a component (repeatable; 'a|b' takes the first the release has).")]
WithOpt = Annotated[list[str] | None, typer.Option(
    "--with", "-w", metavar="PRODUCT[=SPEC]",
    help="Add a library product into the same tree (repeatable): cudnn, cutensor, cusparselt, cudss. "
         "cudnn = its newest release built for the toolkit's CUDA major on the platform; cudnn=9.20 the "
         "newest 9.20.x; cudnn=9.20.0 exactly that.")]
OnlyOpt = Annotated[bool, typer.Option("--only", help="Install exactly the --component list, no profile.")]
BaseUrlOpt = Annotated[str | None, typer.Option(
    "--base-url", envvar="CUDAREDIST_BASE_URL", show_envvar=True,
    help="Redist base URL: http(s)://, file:// or a directory. Default: NVIDIA's.")]
MirrorOpt = Annotated[str | None, typer.Option(
    "--mirror", envvar="CUDAREDIST_MIRROR", show_envvar=True,
    help="A mirror tried before the base URL (http(s)://, file:// or a directory).")]
TrustedHostOpt = Annotated[list[str] | None, typer.Option(
    "--trusted-host", envvar="CUDAREDIST_TRUSTED_HOST", show_envvar=True, metavar="HOST[:PORT]",
    help="Believe manifests and index pages (the hashes) from this plain-HTTP host (repeatable; the "
         "variable is space-separated). Without it only https://, local directories and loopback "
         "addresses are; a plain-HTTP mirror then serves archives only.")]
NoFallbackOpt = Annotated[bool, typer.Option("--no-fallback",
                                             help="Use only the mirror, never the base URL.")]
CacheDirOpt = Annotated[Path | None, typer.Option(
    "--cache-dir", envvar="CUDAREDIST_CACHE_DIR", show_envvar=True, help="Download cache directory.")]
OfflineOpt = Annotated[bool, typer.Option("--offline", help="Use only the cache: no network at all.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
JobsOpt = Annotated[int, typer.Option("--jobs", "-j", min=1, max=64, help="Concurrent connections.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="More output; tracebacks on errors.")]
PrefixOpt = Annotated[Path | None, typer.Option(
    "--prefix", help="The toolkit directory (CUDA_PATH). Without it, a TRAIN names a managed toolkit.")]
ToolkitArg = Annotated[str | None, typer.Argument(
    metavar="[TRAIN]", help="A managed toolkit by train (13.4 = the newest installed 13.4.x), "
                            "instead of --prefix.", show_default=False)]
InstallDirOpt = Annotated[Path | None, typer.Option(
    "--install-dir", envvar="CUDAREDIST_INSTALL_DIR", show_envvar=True,
    help="Where managed toolkits live. Default: the user data dir (`cudaredist list` shows it).")]
SourceOpt = Annotated[str | None, typer.Option(
    "--source", envvar="CUDAREDIST_SOURCE", show_envvar=True, show_default=False,
    help="nvidia: NVIDIA's redist archives; pypi: NVIDIA's wheels, through the cuda-toolkit "
         "metapackage (see docs/pypi-source.md); install --lock: the lock's, another one is refused.  "
         "[default: nvidia]")]
IndexUrlOpt = Annotated[str | None, typer.Option(
    "--index-url", envvar="PIP_INDEX_URL", show_envvar=True,
    help="Package index (Simple API) for --source pypi. Default: PyPI.")]
PlatformsOpt = Annotated[list[str] | None, typer.Option(
    "--platform", "-p", help="Target platform; repeatable or comma-separated. Default: this host's.")]
LockOpt = Annotated[Path | None, typer.Option(
    "--lock", help="Install exactly what this lock file (from `cudaredist lock`) pins: no resolution, "
                   "no manifest; refuses a TRAIN, --platform, --profile or --component it does not pin.")]
LinkModeOpt = Annotated[str | None, typer.Option(
    "--link-mode", envvar="CUDAREDIST_LINK_MODE", show_envvar=True,
    help="How files come from the unpacked cache: clone (copy-on-write where the filesystem can, "
         "else a copy), hardlink (shares the cache's inodes: editing a file in the prefix edits the "
         "cache), copy.  [default: clone]", show_default=False)]
LockTimeoutOpt = Annotated[float | None, typer.Option(
    "--lock-timeout", min=0, show_default=False,
    help="Seconds to wait for another process holding the prefix or cache.  [env var: "
         "CUDAREDIST_LOCK_TIMEOUT; default: 600]")]
