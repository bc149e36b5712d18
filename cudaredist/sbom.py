"""A tree's software bill of materials (issue 47): CycloneDX 1.6 (written beside the record by every
install) and SPDX 2.3 (``cudaredist sbom --format spdx``), both built by their libraries.

Both render one :func:`inventory` of the record: the toolkit, each archive or wheel (its verified
sha256, where it came from, its license), and the host fixes that changed NVIDIA's bytes. The
libraries take ~90 ms (CycloneDX) and ~280 ms (SPDX) to import, more than a warm install may spend
on its SBOM, so an install renders CycloneDX once per inventory into the cache (``sbom/<key>``) and
a later install of the same inventory reuses that document with its own timestamp and serial.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import json
import re
import uuid
from pathlib import Path
from typing import Any

from cudaredist import __version__, fsops, hostfixes
from cudaredist.errors import CudaRedistError
from cudaredist.record import RECORD_DIR, SBOM_FILE

SUPPLIER = "NVIDIA Corporation"
KEY_PROPERTY = "cudaredist:inventory"  # which inventory a document renders (verify compares it)


def sbom_path(prefix: Path) -> Path:
    return prefix / RECORD_DIR / SBOM_FILE


def inventory(record: dict[str, Any]) -> dict[str, Any]:
    """What either SBOM says of the tree ``record`` describes: plain data, no library."""
    plan, served = record["plan"], record.get("provenance", {}).get("archives", {})
    fixes = record.get("host_fixes", [])
    owner = {f["path"]: f.get("component", "") for f in record["files"]} if fixes else {}
    why = {f.id: f.summary for f in hostfixes.fixes()} if fixes else {}
    comps = [{"name": c["name"], "version": c["version"], "sha256": c["sha256"], "size": c.get("size", 0),
              "url": served.get(c["name"]) if served.get(c["name"], "cache") != "cache" else c.get("url", ""),
              "license": c.get("license", ""), "wheel": c.get("layout") == "wheel",
              "file": str(c.get("relative_path", "")).rsplit("/", 1)[-1], "product": c.get("product", ""),
              "platform": c.get("platform") or plan["platform"]} for c in plan["components"]]
    return {"tool": f"cudaredist {__version__}", "release": plan["release"], "platform": plan["platform"],
            "host": plan.get("host", ""), "profile": plan["profile"], "source": plan.get("source", "nvidia"),
            "base_url": plan["base_url"], "hashes_from": plan.get("hashes_from", ""),
            "products": [f"{p['name']} {p['release']}" for p in plan.get("products", [])],
            "components": sorted(comps, key=lambda c: (c["name"], c["platform"], c["sha256"])),
            "host_fixes": [{"id": f["id"], "path": f["path"], "before": f["before"], "after": f["after"],
                            "why": why.get(f["id"], ""), "source": f.get("source", ""),
                            "component": owner.get(f["path"], "")} for f in fixes]}


def inventory_key(inv: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inv, sort_keys=True).encode()).hexdigest()


def write(prefix: Path, record: dict[str, Any], cache_dir: Path) -> str:
    """The CycloneDX SBOM of ``record`` into ``prefix``'s record folder (a staging tree, swapped in
    with it), rendered once per inventory into ``cache_dir`` (a cache that cannot keep it is skipped).
    Returns its name, for the record (verify fails a tree whose record names an SBOM it lacks)."""
    inv = inventory(record)
    kept = cache_dir / f"{inventory_key(inv)}.cdx.json"
    try:
        doc = json.loads(kept.read_bytes())
        doc["metadata"]["timestamp"] = ""  # a rendering of ours (else it is made again)
    except (OSError, ValueError, LookupError, TypeError):
        doc = json.loads(cyclonedx(inv))
        with contextlib.suppress(OSError):
            kept.parent.mkdir(parents=True, exist_ok=True)
            fsops.write_atomic(kept, json.dumps(doc).encode())
    doc["serialNumber"] = f"urn:uuid:{uuid.uuid4()}"
    doc["metadata"]["timestamp"] = _now().isoformat()
    sbom_path(prefix).parent.mkdir(parents=True, exist_ok=True)
    fsops.write_atomic(sbom_path(prefix), (json.dumps(doc, indent=2) + "\n").encode())
    return SBOM_FILE


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def stale(prefix: Path, record: dict[str, Any]) -> str:
    """Why the tree's SBOM does not describe its record ("" when it does): for verify."""
    try:
        doc = json.loads(sbom_path(prefix).read_bytes())
        had = {p.get("name"): p.get("value") for p in doc["metadata"]["properties"]}.get(KEY_PROPERTY)
        hashes = sorted((c["name"], c["hashes"][0]["content"]) for c in doc["components"])
    except FileNotFoundError:  # a tree installed before cudaredist wrote SBOMs has none to miss
        return "missing: `cudaredist install --reinstall` writes it again" if record.get("sbom") else ""
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"unreadable ({exc})"
    inv = inventory(record)
    same = had == inventory_key(inv) and hashes == sorted((c["name"], c["sha256"]) for c in inv["components"])
    return "" if same else "it describes other archives than the record"


def _purl(c: dict[str, Any]) -> Any:
    from packageurl import PackageURL

    if c["wheel"]:
        return PackageURL("pypi", name=c["file"].split("-")[0], version=c["version"])
    return PackageURL("generic", "nvidia", c["name"], c["version"],
                      {"download_url": c["url"], "checksum": f"sha256:{c['sha256']}"})


def _props(c: dict[str, Any], *names: str) -> list[tuple[str, str]]:
    return [(f"cudaredist:{n}", str(c[n])) for n in names if c.get(n)]


def _fix_text(f: dict[str, Any]) -> str:
    return (f"host fix {f['id']} changed {f['path']}: sha256 {f['before']} -> {f['after']}. "
            f"{f['why']} Source: {f['source']}")


def _ref(c: dict[str, Any]) -> str:
    return f"{c['name']}-{c['platform']}-{c['sha256'][:16]}"


def cyclonedx(inv: dict[str, Any]) -> str:
    from cyclonedx.model import ExternalReference as Ref
    from cyclonedx.model import ExternalReferenceType, HashAlgorithm, HashType, Property, XsUri
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType, Patch, PatchClassification, Pedigree
    from cyclonedx.model.contact import OrganizationalEntity
    from cyclonedx.model.issue import IssueClassification, IssueType
    from cyclonedx.model.license import DisjunctiveLicense
    from cyclonedx.output.json import JsonV1Dot6

    def props(pairs: list[tuple[str, str]]) -> list[Property]:
        return [Property(name=k, value=v) for k, v in pairs]

    def dist(url: str) -> list[Ref]:
        return [Ref(type=ExternalReferenceType.DISTRIBUTION, url=XsUri(url))] if url else []

    supplier = OrganizationalEntity(name=SUPPLIER, urls=[XsUri("https://www.nvidia.com")])
    root = Component(name="cuda-toolkit", version=inv["release"], type=ComponentType.APPLICATION,
                     bom_ref="toolkit", supplier=supplier, properties=props(_props(
                         inv, "platform", "host", "profile", "source", "hashes_from")
                         + [("cudaredist:product", p) for p in inv["products"]]),
                     external_references=dist(inv["base_url"]))
    comps = []
    for c in inv["components"]:
        fixes = [f for f in inv["host_fixes"] if f["component"] == c["name"]]
        patches = [Patch(type=PatchClassification.BACKPORT, resolves=[IssueType(
            type=IssueClassification.DEFECT, id=f["id"], name=f["path"], description=_fix_text(f))])
            for f in fixes]
        comps.append(Component(
            name=c["name"], version=c["version"], bom_ref=_ref(c), supplier=supplier, purl=_purl(c),
            type=ComponentType.LIBRARY, hashes=[HashType(alg=HashAlgorithm.SHA_256, content=c["sha256"])],
            licenses=[DisjunctiveLicense(name=c["license"])] if c["license"] else [],
            external_references=dist(c["url"]),
            pedigree=Pedigree(patches=patches, notes="; ".join(map(_fix_text, fixes))) if fixes else None,
            properties=props(_props(c, "platform", "product", "file"))))
    bom = Bom(components=comps, metadata=BomMetaData(
        component=root, timestamp=_now(), properties=props([(KEY_PROPERTY, inventory_key(inv))])))
    bom.metadata.tools.components.add(Component(name="cudaredist", version=__version__,
                                                type=ComponentType.APPLICATION))
    bom.register_dependency(root, comps)
    return str(JsonV1Dot6(bom).output_as_string(indent=2))


def spdx(inv: dict[str, Any]) -> str:
    """``inv`` as SPDX 2.3 JSON (spdx-tools), a host fix as an annotation of the package it changed."""
    try:
        from spdx_tools.common.spdx_licensing import spdx_licensing
    except ImportError:
        raise CudaRedistError("--format spdx needs spdx-tools, an optional dependency: install cudaredist "
                         "with its spdx extra (pip install 'cudaredist[spdx]', uv tool install "
                         "'cudaredist[spdx]'), or use --format cyclonedx") from None
    from spdx_tools.spdx.model.actor import Actor, ActorType
    from spdx_tools.spdx.model.annotation import Annotation, AnnotationType
    from spdx_tools.spdx.model.checksum import Checksum, ChecksumAlgorithm
    from spdx_tools.spdx.model.document import CreationInfo, Document
    from spdx_tools.spdx.model.extracted_licensing_info import ExtractedLicensingInfo
    from spdx_tools.spdx.model.package import ExternalPackageRef, ExternalPackageRefCategory, Package
    from spdx_tools.spdx.model.relationship import Relationship, RelationshipType
    from spdx_tools.spdx.model.spdx_no_assertion import SpdxNoAssertion
    from spdx_tools.spdx.validation.uri_validators import validate_download_location
    from spdx_tools.spdx.writer.json.json_writer import write_document_to_stream

    now, nvidia = _now(), Actor(ActorType.ORGANIZATION, SUPPLIER)
    tool = Actor(ActorType.TOOL, inv["tool"])
    licenses = {n: "LicenseRef-" + re.sub(r"[^A-Za-z0-9.]+", "-", n).strip("-")
                for n in sorted({c["license"] for c in inv["components"] if c["license"]})}
    def where(url: str) -> Any:  # a location SPDX does not know (a directory, file://): in source_info only
        return SpdxNoAssertion() if validate_download_location(url) else url

    root = Package("SPDXRef-toolkit", "cuda-toolkit", where(inv["base_url"]), inv["release"], supplier=nvidia,
                   source_info=f"resolved from {inv['base_url']}",
                   files_analyzed=False, comment="; ".join(f"{k}: {v}" for k, v in _props(
                       inv, "platform", "host", "profile", "source", "hashes_from")))
    packages, annotations = [root], []
    relations = [Relationship("SPDXRef-DOCUMENT", RelationshipType.DESCRIBES, root.spdx_id)]
    for c in inv["components"]:
        sid = "SPDXRef-" + re.sub(r"[^A-Za-z0-9.-]+", "-", _ref(c))
        lic = spdx_licensing.parse(licenses[c["license"]]) if c["license"] else SpdxNoAssertion()
        packages.append(Package(
            sid, c["name"], where(c["url"]), c["version"], file_name=c["file"] or None,
            source_info=f"downloaded from {c['url']}" if c["url"] else None,
            supplier=nvidia, files_analyzed=False, license_declared=lic, license_concluded=SpdxNoAssertion(),
            copyright_text=SpdxNoAssertion(),
            checksums=[Checksum(ChecksumAlgorithm.SHA256, c["sha256"])],
            comment="; ".join(f"{k}: {v}" for k, v in _props(c, "platform", "product")) or None,
            external_references=[ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl",
                                                    _purl(c).to_string())]))
        relations.append(Relationship(root.spdx_id, RelationshipType.CONTAINS, sid))
        annotations += [Annotation(sid, AnnotationType.OTHER, tool, now, _fix_text(f))
                        for f in inv["host_fixes"] if f["component"] == c["name"]]
    doc = Document(CreationInfo("SPDX-2.3", "SPDXRef-DOCUMENT", f"cuda-toolkit {inv['release']}",
                                f"https://spdx.org/spdxdocs/cudaredist-{inv['release']}-{uuid.uuid4()}",
                                [tool, Actor(ActorType.ORGANIZATION, "cudaredist")], now,
                                creator_comment=f"{KEY_PROPERTY} {inventory_key(inv)}"),
                   packages=packages, relationships=relations, annotations=annotations,
                   extracted_licensing_info=[ExtractedLicensingInfo(ref, f"See NVIDIA's manifest: {n}", n)
                                             for n, ref in licenses.items()])
    out = io.StringIO()
    write_document_to_stream(doc, out, validate=True)
    return out.getvalue()
