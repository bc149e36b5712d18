"""The command-line options the commands share (typer annotations), and how ``--help`` lays them out."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from cudaredist.profiles import DEFAULT_PROFILE

Train = Annotated[str, typer.Argument(help="CUDA train (13.4 = newest 13.4.x; 13 = newest 13.x) "
                                           "or exact release (13.4.1).")]
PlatformOpt = Annotated[str | None, typer.Option(
    "--platform", "-p", help="Target platform (linux-x86_64, linux-sbsa, windows-x86_64, "
                             "windows-arm64). Default: this host's.")]
HostOpt = Annotated[str | None, typer.Option(
    "--host", help="A cross tree: nvcc and the other tools for this platform (the build machine: "
                   "linux-x86_64, windows-x86_64), the headers and libraries for --platform "
                   "(linux-sbsa, windows-arm64). Default: the tools of --platform.")]
ProfileOpt = Annotated[str | None, typer.Option(
    "--profile", show_default=False,
    help="Component profile: nvcc, runtime, build, torch (`cudaredist profiles` lists them).  "
         f"[default: {DEFAULT_PROFILE}]")]
ComponentOpt = Annotated[list[str] | None, typer.Option(
    "--component", "-c", metavar="NAME",
    help="Add a component (repeatable; 'a|b' takes the first the release has).")]
WithOpt = Annotated[list[str] | None, typer.Option(
    "--with", "-w", metavar="PRODUCT[=SPEC]",
    help="Add a library product into the same tree (repeatable): cudnn, cutensor, cusparselt, cudss. "
         "cudnn = its newest release built for the toolkit's CUDA major on the platform; cudnn=9.20 the "
         "newest 9.20.x; cudnn=9.20.0 exactly that.")]
OutputOpt = Annotated[Path | None, typer.Option(
    "--output", "-o", metavar="FILE", help="Write it to FILE (default: print it).")]
OnlyOpt = Annotated[bool, typer.Option("--only", help="Install exactly the --component list, no profile.")]
BaseUrlOpt = Annotated[str | None, typer.Option(
    "--base-url", envvar="CUDAREDIST_BASE_URL", show_envvar=True, metavar="URL",
    help="Redist base URL: http(s)://, file:// or a directory. Default: NVIDIA's.")]
ChannelOpt = Annotated[str | None, typer.Option(
    "--channel", envvar="CUDAREDIST_CHANNEL", show_envvar=True, metavar="release|preview",
    help="NVIDIA's index to read: release (the default, compute/cuda/redist) or preview (early-access "
         "releases, never picked unless asked for). Instead of --base-url.")]
MirrorOpt = Annotated[str | None, typer.Option(
    "--mirror", envvar="CUDAREDIST_MIRROR", show_envvar=True, metavar="URL",
    help="A mirror tried before the base URL (http(s)://, file:// or a directory).")]
TrustedHostOpt = Annotated[list[str] | None, typer.Option(
    "--trusted-host", envvar="CUDAREDIST_TRUSTED_HOST", show_envvar=True, metavar="HOST[:PORT]",
    help="Believe manifests and index pages (the hashes) from this plain-HTTP host (repeatable; the "
         "variable is space-separated). Without it only https://, local directories and loopback "
         "addresses are; a plain-HTTP mirror then serves archives only.")]
NoFallbackOpt = Annotated[bool, typer.Option("--no-fallback",
                                             help="Use only the mirror, never the base URL.")]
CacheDirOpt = Annotated[Path | None, typer.Option(
    "--cache-dir", envvar="CUDAREDIST_CACHE_DIR", show_envvar=True, metavar="DIR",
    help="Download cache directory.")]
OfflineOpt = Annotated[bool, typer.Option("--offline", help="Use only the cache: no network at all.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
JobsOpt = Annotated[int, typer.Option("--jobs", "-j", min=1, max=64, metavar="N",
                                      help="Concurrent connections.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="More output; tracebacks on errors.")]
NoHostFixesOpt = Annotated[bool, typer.Option(
    "--no-host-fixes",
    help="Keep NVIDIA's bytes exactly: apply none of the known host fixes (such as the glibc 2.42 rsqrt "
         "declarations of CUDA < 13.2's crt/math_functions.h; `cudaredist info` lists those applied).")]
PrefixOpt = Annotated[Path | None, typer.Option(
    "--prefix", metavar="DIR",
    help="The toolkit directory (CUDA_PATH). Without it, a TRAIN names a managed toolkit.")]
ToolkitArg = Annotated[str | None, typer.Argument(
    metavar="[TRAIN]", help="A managed toolkit by train (13.4 = the newest installed 13.4.x), "
                            "instead of --prefix.", show_default=False)]
InstallDirOpt = Annotated[Path | None, typer.Option(
    "--install-dir", envvar="CUDAREDIST_INSTALL_DIR", show_envvar=True, metavar="DIR",
    help="Where managed toolkits live. Default: the user data dir (`cudaredist list` shows it).")]
SourceOpt = Annotated[str | None, typer.Option(  # None: not given (install --lock takes the lock's)
    "--source", envvar="CUDAREDIST_SOURCE", show_envvar=True, show_default=False, metavar="nvidia|pypi",
    help="nvidia: NVIDIA's redist archives; pypi: NVIDIA's wheels, through the cuda-toolkit "
         "metapackage (see docs/pypi-source.md); install --lock: the lock's, another one is refused.  "
         "[default: nvidia]")]
IndexUrlOpt = Annotated[str | None, typer.Option(
    "--index-url", envvar="PIP_INDEX_URL", show_envvar=True, metavar="URL",
    help="Package index (Simple API) for --source pypi. Default: PyPI.")]
PlatformsOpt = Annotated[list[str] | None, typer.Option(
    "--platform", "-p", help="Target platform; repeatable or comma-separated. Default: this host's.")]
LockOpt = Annotated[Path | None, typer.Option(
    "--lock", metavar="FILE",
    help="Install exactly what this lock file (from `cudaredist lock`) pins: no resolution, "
                   "no manifest; refuses a TRAIN, --platform, --profile or --component it does not pin.")]
LinkModeOpt = Annotated[str | None, typer.Option(
    "--link-mode", envvar="CUDAREDIST_LINK_MODE", show_envvar=True, metavar="clone|hardlink|copy",
    help="How files come from the unpacked cache: clone (copy-on-write where the filesystem can, "
         "else a copy), hardlink (shares the cache's inodes: editing a file in the prefix edits the "
         "cache), copy.  [default: clone]", show_default=False)]
CacheUnpackedOpt = Annotated[bool, typer.Option(
    "--cache-unpacked/--no-cache-unpacked", envvar="CUDAREDIST_CACHE_UNPACKED", show_envvar=True,
    help="Keep each new archive unpacked in the cache, so that a later install places its files "
         "without decoding (--link-mode). --no-cache-unpacked extracts straight into the prefix, each "
         "file written once: for a runner whose cache does not outlive the job (the archives are "
         "cached either way).  [default: --cache-unpacked]", show_default=False)]
LockTimeoutOpt = Annotated[float | None, typer.Option(
    "--lock-timeout", min=0, show_default=False, metavar="SECONDS",
    help="Seconds to wait for another process holding the prefix or cache.  [env var: "
         "CUDAREDIST_LOCK_TIMEOUT; default: 600]")]

HostCompilerOpt = Annotated[str | None, typer.Option(
    "--host-compiler", metavar="auto|off|COMPILER",  # else hostcc.for_tree reads CUDAREDIST_HOST_COMPILER
    help="The host compiler nvcc runs with the tree (else $CUDAREDIST_HOST_COMPILER): auto (nvcc's own "
         "when the tree's host_config.h accepts it, else the newest installed that it accepts, exported as "
         "NVCC_CCBIN, CUDAHOSTCXX and, for MSVC, the toolset's environment), off, or one to use (a path or "
         "command; on Windows also an MSVC toolset version, 14.44).  [default: auto]", show_default=False)]

CompatOpt = Annotated[str | None, typer.Option(
    "--compat", envvar="CUDAREDIST_COMPAT", show_envvar=True, metavar="auto|on|off",
    help="The tree's forward-compatibility package (compat/, `install --with compat`) first on "
         "LD_LIBRARY_PATH: auto (only where this host's driver is too old for the train and NVIDIA "
         "supports compat on its branch and GPUs), on, or off.  [default: auto]", show_default=False)]


# -- --help: options and commands grouped by purpose, as uv's help is ----------------------------------
# Every shared option's panel; an option named nowhere here is the command's own ("Options", first).
PANELS: dict[str, tuple[str, ...]] = {
    "Which toolkit": ("--platform", "--host", "--profile", "--component", "--only", "--with", "--lock"),
    "Where from": ("--source", "--base-url", "--channel", "--mirror", "--no-fallback", "--trusted-host",
                   "--index-url", "--offline", "--refresh", "--cache-dir", "--jobs"),
    "Install location": ("--prefix", "--install-dir", "--link-mode", "--cache-unpacked", "--no-host-fixes",
                         "--reinstall", "--replace-foreign", "--lock-timeout"),
    "Output": ("--json", "--quiet", "--verbose", "--version", "--help"),
}
COMMAND_PANELS: dict[str, tuple[str, ...]] = {
    "Install and use": ("install", "env", "run", "find", "list", "uninstall"),
    "Look before or after": ("resolve", "trains", "profiles", "info", "verify", "sbom", "doctor"),
    "For CI and fleets": ("lock", "mirror", "cache"),
}


def _format_options(self: Any, ctx: Any, formatter: Any) -> None:
    """Arguments, options in PANELS and a group's commands in COMMAND_PANELS (the top level's; ``cache``
    lists its commands plainly), each non-empty section under its title, one first-column width in all."""
    # (click's types, duck-typed: typer vendors click from 0.28 on, as typer.core does itself)
    sections: dict[str, list[tuple[str, str]]] = {
        t: [] for t in ("Arguments", "Options", *PANELS, *COMMAND_PANELS, "Commands")}
    for param in self.get_params(ctx):
        if param.param_type_name == "option" and param.metavar is None and not param.is_flag:
            param.metavar = (param.name or "value").upper()  # not click's <str>
        if (record := param.get_help_record(ctx)) is not None:
            panel = next((p for p, opts in PANELS.items() if set(param.opts) & set(opts)), "Options")
            sections["Arguments" if param.param_type_name == "argument" else panel].append(record)
    if isinstance(self, TyperGroup):
        panel_of = {n: t for t, cmds in COMMAND_PANELS.items() for n in cmds} if ctx.parent is None else {}
        order = list(panel_of)
        names = sorted(self.list_commands(ctx), key=lambda n: order.index(n) if n in order else len(order))
        width = formatter.width - 6 - max(map(len, names), default=0)
        for n in names:
            if (c := self.get_command(ctx, n)) is not None and not c.hidden:
                sections[panel_of.get(n, "Commands")].append((n, c.get_short_help_str(width)))
    width = min(30, max((len(name) for rows in sections.values() for name, _ in rows), default=0))
    for title, rows in sections.items():
        if rows:
            with formatter.section(title):
                formatter.write_dl([(name.ljust(width), text) for name, text in rows])


class HelpCommand(TyperCommand):
    format_options = _format_options


class HelpGroup(TyperGroup):
    format_options = _format_options


_F = TypeVar("_F", bound=Callable[..., Any])


class App(typer.Typer):
    """typer.Typer whose commands and groups lay their --help out by purpose."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(cls=HelpGroup, **settings)

    def command(self, name: str | None = None, **kwargs: Any) -> Callable[[_F], _F]:
        return super().command(name, **{"cls": HelpCommand, **kwargs})
