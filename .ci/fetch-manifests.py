"""Fetch the NVIDIA manifests that the real-manifest tests read into a folder shaped like
../shared/redist/manifests: CUDA's redistrib_X.Y.Z.json at the top, each library product's under
<product>/ (fetched from the product's folder beside CUDA's, as cudaredist finds it). The list is
.ci/manifests.txt; the base is NVIDIA's release channel unless --base-url names another.

    python .ci/fetch-manifests.py --out "$CUDAREDIST_TEST_MANIFESTS"

Runs with cudaredist installed (its transport: retries, proxies, the OS trust store). A file that
is already there is kept. Exit 1 names every manifest that could not be fetched.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cudaredist.errors import CudaRedistError
from cudaredist.fetch.transport import Transport
from cudaredist.plan import join_url
from cudaredist.sources.nvidia.index import CHANNELS, normalize_base
from cudaredist.sources.nvidia.products import product_base

LIST = Path(__file__).with_name("manifests.txt")


def wanted(listing: Path) -> list[str]:
    lines = (line.strip() for line in listing.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the folder to fill")
    ap.add_argument("--base-url", default=CHANNELS["release"], help="CUDA's redist folder")
    ap.add_argument("--list", type=Path, default=LIST, help="the manifests, one relative path a line")
    args = ap.parse_args(argv)
    base = normalize_base(args.base_url)
    names = wanted(args.list)
    failed: list[str] = []
    with Transport() as transport:
        for rel in names:
            product, _, name = rel.rpartition("/")
            dest = args.out / rel
            if dest.is_file():
                continue
            url = join_url(product_base(base, product) if product else base, name)
            try:
                data = transport.get_bytes(url)
                json.loads(data)  # a manifest, not a captive portal's page
            except (CudaRedistError, ValueError) as exc:
                failed.append(f"{rel} ({url}): {exc}")
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            part = dest.with_name(dest.name + ".part")
            part.write_bytes(data)
            part.replace(dest)
    print(f"{len(names) - len(failed)} of {len(names)} manifests in {args.out}")
    if failed:
        print("could not fetch:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
