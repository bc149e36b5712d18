"""Library products from a package index (``--source pypi --with cudnn``): NVIDIA's wheel of each
product for the toolkit's CUDA major (``nvidia-cudnn-cu13``, ``nvidia-cudss-cu12``, ...; names in
``[products.*]`` of profiles.toml), mapped into the same tree as the toolkit's wheels (I/O)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cudaredist.errors import FetchError, PlanError, ResolveError
from cudaredist.plan import PlannedArchive, ProductRelease
from cudaredist.profiles import ProductRequest
from cudaredist.sources.pypi.wheels import by_version, pick_wheel, wheel_platforms

if TYPE_CHECKING:
    from cudaredist.sources.pypi.index import WheelIndex


def plan_product(index: WheelIndex, request: ProductRequest, *, platform: str,
                 cuda_release: str) -> tuple[ProductRelease, PlannedArchive]:
    """The newest wheel of the product for ``cuda_release``'s major that ``request`` allows and that
    fits ``platform``; else a :class:`ResolveError` naming what the index has for that platform."""
    product, major = request.product, cuda_release.split(".")[0]
    name = product.wheel_name(major)
    try:
        files = index.files(name)
    except FetchError as exc:
        if exc.status != 404 or index.pages_from_the_mirror_only:  # the mirror lacks it: its own error
            raise
        raise ResolveError(
            f"{product.title} for CUDA {major} is not on {index.index_url}: the index has no project "
            f"{name} (NVIDIA's {product.title} wheel for CUDA {major}); use --source nvidia, or another "
            "CUDA train", requested=str(request), where=index.index_url) from exc
    found = {v: fs for v, fs in by_version(files, name).items() if not v.is_prerelease}
    plat = index.data.platform(platform)
    allowed = [v for v in sorted(found, reverse=True) if request.matches(str(v))]
    for version in allowed:
        if (chosen := pick_wheel([f for f in found[version] if not f.yanked], plat)) is None:
            continue
        item = index.planned(name, chosen, product.specs[0].names[0], str(version),
                             f"{product.title} {version}", release=cuda_release, platform=platform,
                             product=request.name)
        label = ".".join(str(p) for p in (*version.release, 0, 0)[:3])  # 9.28.1.4 -> 9.28.1, as the redist
        return ProductRelease(request.name, label, str(request), chosen.upload_time[:10],
                              index.served.get(name, index.index_url), f"cuda{major}"), item
    fits = [f"{v} ({wheel_platforms(found[v], index.data.platforms.values())})" for v in sorted(found)]
    asked = f" {request.spec}" if request.spec else ""
    if not allowed:
        raise ResolveError(
            f"{product.title}{asked} has no wheel {name} on {index.index_url} for CUDA {major}; its "
            f"releases there: {', '.join(str(v) for v in sorted(found, reverse=True)[:12]) or 'none'}",
            requested=str(request), where=index.index_url)
    raise PlanError(
        f"{product.title}{asked} has no wheel {name} for {platform} on {index.index_url} (its wheels: "
        f"{'; '.join(fits[-8:]) or 'none'})", component=name, release=cuda_release, platform=platform)
