"""The install below the command line: one call that takes a request and gives what it did.

:func:`install` owns every decision between the options and the transaction: the no-op check
(no network for a prefix that already answers the request), the lock file, where managed
toolkits go, one download pool for several trains, and the train links, updated under the
install dir's lock. Every train is resolved before anything is downloaded; in the install dir,
one train failing to install does not stop the others: those that installed get their links,
and the outcome lists which failed. The command line only parses the
options into an :class:`InstallRequest` and renders the :class:`InstallOutcome`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cudaredist import profiles
from cudaredist.cache.store import Cache, index_ttl_default, lock_wait
from cudaredist.drift import outdated
from cudaredist.errors import CudaRedistError, UsageError
from cudaredist.hostfixes import pending
from cudaredist.installdir import install_dir, toolkit_name
from cudaredist.interrupts import with_done
from cudaredist.managed import Scan, host, link_trains, scan
from cudaredist.managed import tidy as tidy_dir
from cudaredist.prefixes import canonical_prefix, refuse_foreign, tidy
from cudaredist.record import read_record, satisfies
from cudaredist.sources import check_source, open_source
from cudaredist.sources.base import Where, check_where
from cudaredist.tree.links import link_mode
from cudaredist.trust import Trust

if TYPE_CHECKING:
    from cudaredist.install import Installer, InstallResult
    from cudaredist.plan import Plan
    from cudaredist.progress import Reporter


@dataclass(frozen=True)
class InstallRequest:
    """What to install and where, as the options say (``None``: the default)."""

    trains: tuple[str, ...] = ()
    prefix: Path | None = None         # one train into exactly this directory
    install_dir: Path | None = None    # managed installs (no prefix): --install-dir > env > data dir
    platform: str | None = None
    host: str | None = None            # --host: a cross tree, the tools of this platform (None: native)
    profile: str | None = None
    components: tuple[str, ...] = ()
    only: bool = False                 # exactly the components, no profile
    products: tuple[str, ...] = ()     # --with PRODUCT[=SPEC]: libraries added to the tree (cudnn, ...)
    lock: Path | None = None           # install exactly what this lock file pins
    source: str | None = None          # None: the lock's, else --source / env / nvidia
    reinstall: bool = False
    replace_foreign: bool = False
    refresh: bool = False              # look for a newer release even if satisfied
    host_fixes: bool = True            # apply the known host fixes (False: --no-host-fixes)
    link_mode: str | None = None
    cache_unpacked: bool = True        # keep new archives unpacked in the cache (False: --no-cache-unpacked)
    lock_timeout: float | None = None
    jobs: int = 8
    cache_dir: Path | None = None
    where: Where = field(default_factory=Where)


@dataclass(frozen=True)
class Installed:
    """One toolkit the request asked for, installed now or found already there (``noop``)."""

    prefix: Path
    noop: bool
    plan: dict[str, Any]   # its release and platform are the toolkit's
    message: str
    downloaded: int = 0
    cached: int = 0
    files: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"prefix": str(self.prefix), "noop": self.noop, "release": self.plan["release"],
                "platform": self.plan["platform"], "downloaded": self.downloaded, "cached": self.cached,
                "files": self.files, "seconds": round(self.seconds, 3), "plan": self.plan,
                "message": self.message}


@dataclass(frozen=True)
class Failed:
    """A train of a managed install that failed (the others went on)."""

    train: str
    error: CudaRedistError

    def to_json(self) -> dict[str, Any]:
        return {"train": self.train, "error": str(self.error), "exit_code": self.error.exit_code}


@dataclass
class InstallOutcome:
    install_dir: Path | None           # None: into --prefix
    done: list[Installed] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # for stderr even when quiet

    def to_json(self) -> dict[str, Any]:
        if self.install_dir is None:
            return self.done[0].to_json()
        return {"install_dir": str(self.install_dir), "toolkits": [d.to_json() for d in self.done],
                "links": dict(self.links)} | ({"failed": [f.to_json() for f in self.failed]}
                                              if self.failed else {})


def install(request: InstallRequest, *, reporter: Reporter | None = None,
            say: Callable[[str], None] = lambda _text: None) -> InstallOutcome:
    """Install what ``request`` asks for; ``say`` gets one line per step a user wants to see.

    A failure of the request (its options, the lock file, a train that does not resolve, Ctrl-C)
    is raised before anything is installed. Into a ``--prefix`` a failed install is raised too;
    into the install dir it is the train's: listed in the outcome, while the other trains are
    installed and linked."""
    wanted = list(dict.fromkeys(request.trains))
    if request.lock is None and not wanted:
        raise UsageError("give a TRAIN (e.g. 13.4), several trains, or --lock FILE")
    if request.prefix is not None and len(wanted) > 1:
        raise UsageError("--prefix takes one TRAIN; without --prefix, each train goes to the install dir")
    _check_options(request)  # the same checks whether or not the install turns out a no-op
    fixed = canonical_prefix(request.prefix) if request.prefix is not None else None
    outcome = InstallOutcome(None if fixed is not None else install_dir(request.install_dir))
    timeout = lock_wait(request.lock_timeout)
    # leftovers of a killed run cleaned before anything that may need the network
    for action in (tidy(fixed, timeout) if fixed is not None else
                   tidy_dir(cast(Path, outcome.install_dir), timeout)):
        (outcome.warnings.append if action.startswith("warning: ") else say)(action)
    if fixed is not None and not request.replace_foreign:
        refuse_foreign(fixed)
    if request.lock is None and not (request.reinstall or request.refresh):
        there = fixed if fixed is not None else scan(cast(Path, outcome.install_dir))  # once for every train
        for train in list(wanted):
            found = _satisfied(request, train, there, say)
            if found is not None:
                wanted.remove(train)
                outcome.done.append(found)
                say(found.message)
    try:
        if request.lock is not None or wanted:
            _run(request, wanted, fixed, outcome, reporter, say)
        if outcome.install_dir is not None:
            # even when a train failed: those that installed get their links
            outcome.links = link_trains(outcome.install_dir, timeout=timeout, warn=outcome.warnings.append)
    except KeyboardInterrupt as exc:
        # Ctrl-C during the installs, with what each prefix holds: the transaction's own words (or
        # that nothing was changed), and the trains installed before it came (during the links, the
        # toolkits are in place: said, with what the links are)
        raise with_done(exc, "interrupted; nothing was changed in the prefix", "installed before it", [
            f"CUDA {d.plan['release']} into {d.prefix}" for d in outcome.done if not d.noop]) from None
    return outcome


def _check_options(request: InstallRequest) -> None:
    """Every option that can be wrong without the network: a usage error before anything else (the
    no-op included: an installed prefix answers a bad option as an empty one does)."""
    link_mode(request.link_mode)
    if tools := _host(request):  # (it reads --platform: an unknown one is a usage error here)
        _cross_gate(tools, request)
        if request.lock is not None:
            raise UsageError("--host builds a cross tree from the train; --lock installs what the lock "
                             "file pins (a cross tree's lock pins its host already): give one of them")
        profiles.cross_rule(profiles.host_platform(request.platform), tools)
    # with a lock file and no --source, the lock's source decides what else fits (read later, offline)
    source = check_source(request.source) if request.source is not None or request.lock is None else None
    check_where(request.where, source)
    Trust.of(request.where.trusted_hosts)
    if request.lock is None:
        profiles.parse_product_requests(request.products)
        if (profile := _profile(request)) is not None:
            profiles.get_profile(profile)


def _cross_gate(host: str, request: InstallRequest) -> None:
    """The one rule for a cross tree, from ``--host`` or a lock file that pins a host: it goes into
    ``--prefix DIR``, never the install dir (which names, lists and runs its toolkits by one platform)."""
    if host and request.prefix is None:
        raise UsageError(f"a cross tree (tools for {host}: --host, or a lock file that pins one) goes into "
                         "--prefix DIR: the install dir names its toolkits by one platform")


def _host(request: InstallRequest) -> str:
    """The platform a cross tree's tools run on, "" for a native tree (no --host, or the target's)."""
    host = request.host or ""
    return "" if host == profiles.host_platform(request.platform) else host


def _profile(request: InstallRequest) -> str | None:
    return profiles.effective_profile(request.profile, request.only)


def _satisfied(request: InstallRequest, train: str, there: Path | Scan,
               say: Callable[[str], None]) -> Installed | None:
    """The toolkit already answering ``train`` (read from its record, no network), else None; one
    installed for this request that lacks what its profile means today is said and updated."""
    platform = profiles.host_platform(request.platform)
    # --prefix: that tree; the install dir: its toolkits of the train, newest first (records as scanned)
    found = [(there, read_record(there) if there.is_dir() else None)] if isinstance(there, Path) else \
        [(t.path, t.record) for t in there.find(train, platform)]
    hit = next(((where, rec) for where, rec in found if rec is not None and satisfies(
        rec, train=train, platform=platform, profile=_profile(request), components=request.components,
        source=check_source(request.source), products=request.products, host=_host(request))), None)
    if hit is None:
        return None
    where, rec = hit
    assert rec is not None  # the record satisfies judged
    # installed for this request: what it lacks today (drift.outdated), else a host fix, is said and updated
    if why := outdated(rec) or pending(where, rec, request.host_fixes):
        say(f"{where}: {'; '.join(why)}; updating")
        return None
    plan = rec["plan"]
    return Installed(where, True, plan,
                     f"CUDA {plan['release']}{_with_text(plan)} ({plan['platform']}, {plan['profile']}) is "
                     f"already installed in {where}; nothing to do (--refresh looks for a newer release)",
                     files=len(rec["files"]))


def _run(request: InstallRequest, wanted: list[str], fixed: Path | None, outcome: InstallOutcome,
         reporter: Reporter | None, say: Callable[[str], None]) -> None:
    """Resolve (or read the lock), fetch and install: the part that needs the source."""
    from cudaredist.fetch.transport import Transport
    from cudaredist.install import Installer
    from cudaredist.sources.cross import resolve_tree

    components, source = list(request.components), request.source
    lock_plan: Plan | None = None
    if request.lock is not None:
        from cudaredist.publish.lockfile import read_lock, select  # only with --lock

        locked = read_lock(request.lock)
        lock_plan = select(
            locked, train=wanted[0] if wanted else None, platform=request.platform, host=host(),
            profile="custom" if request.only else request.profile,
            components=list(request.components) if (request.components or request.only) else None,
            source=None if request.source is None else check_source(request.source),
            products=list(request.products) if request.products else None)
        _cross_gate(lock_plan.host, request)
        components, source = list(locked.components), lock_plan.source
    # a warm install asks no server: index pages and manifests fetched within the TTL answer
    # (--refresh: the server is asked)
    cache = Cache(request.cache_dir, index_ttl=0.0 if request.refresh else index_ttl_default(),
                  lock_timeout=lock_wait(request.lock_timeout))
    transport = Transport(connections=request.jobs)
    try:
        src = open_source(source, transport, cache, request.where)
        if lock_plan is not None:
            plans = [(wanted[0] if wanted else str(request.lock), src.relocate(lock_plan))]
        else:  # every train resolved before any download: a train that does not exist installs nothing
            platform = profiles.host_platform(request.platform)
            plans = [(train, resolve_tree(src, train, platform, _host(request), profile=_profile(request),
                                          components=components, products=request.products))
                     for train in wanted]
        installer = Installer(transport, cache, reporter=reporter, jobs=request.jobs,
                              offline=request.where.offline, lock_timeout=request.lock_timeout,
                              link_mode=request.link_mode, cache_unpacked=request.cache_unpacked)
        if len(plans) > 1:
            plans = _prefetch(installer, plans, outcome)
        for train, plan in plans:
            target = fixed or cast(Path, outcome.install_dir) / toolkit_name(plan.release, plan.platform)
            say(f"CUDA {plan.release}{_with_text(plan.to_json())} for {plan.platform} ({plan.profile}: "
                f"{', '.join(plan.components)}) -> {target}")
            for note in plan.notes:
                say(f"note: {note}")
            try:
                result = installer.install(plan, target, reinstall=request.reinstall,
                                           replace_foreign=request.replace_foreign, requested=components,
                                           host_fixes=request.host_fixes)
            except CudaRedistError as exc:
                if fixed is not None:
                    raise
                outcome.failed.append(Failed(train, exc))  # in the install dir: the train's, the others go on
                continue
            outcome.warnings += result.warnings
            outcome.done.append(_row(result, plan))
            say(outcome.done[-1].message)
    finally:
        if reporter is not None:
            reporter.close()
        transport.close()


def _prefetch(installer: Installer, plans: list[tuple[str, Plan]],
              outcome: InstallOutcome) -> list[tuple[str, Plan]]:
    """Fetch the archives of every train with one pool. When that fails, the trains whose archives
    all arrived go on; the others fail with its error (rather than each retrying the network)."""
    try:
        installer.prefetch([p for _t, p in plans])
        return plans
    except CudaRedistError as exc:
        cache = installer.cache
        go = [(t, p) for t, p in plans
              if all(cache.lookup(i.archive.sha256, i.archive.size) is not None for i in p.items)]
        outcome.failed.extend(Failed(t, exc) for t, p in plans if (t, p) not in go)
        return go


def _with_text(plan: dict[str, Any]) -> str:
    """`` with cuDNN 9.27.0`` for a plan (as JSON) that adds products, else ""."""
    added = [f"{profiles.product_title(str(p['name']))} {p['release']}" for p in plan.get("products", ())]
    return f" with {', '.join(added)}" if added else ""


def _row(result: InstallResult, plan: Plan) -> Installed:
    what = f"CUDA {plan.release}{_with_text(plan.to_json())} ({plan.platform})"
    message = (f"{what} is already installed in {result.prefix}; nothing to do" if result.noop else
               f"installed {what} into {result.prefix}: {result.files} files, {result.downloaded} "
               f"downloaded, {result.cached} from cache, {result.seconds:.1f}s")
    return Installed(result.prefix, result.noop, plan.to_json(), message, result.downloaded, result.cached,
                     result.files, result.seconds)
