"""Repack installed nvidia-* distributions (files byte for byte, from their RECORD) into wheels,
then write a PEP 503 directory index of those wheels plus the carried ones.

    repack_installed.py OUT [DIR_OF_MORE_WHEELS ...]
"""

import hashlib
import html
import importlib.metadata as md
import pathlib
import re
import sys
import zipfile

WANT = re.compile(r"^nvidia-(cublas|cuda-runtime|cuda-nvrtc|cusparse|cusolver|curand|cufft|nvjitlink|nvtx"
                  r"|cuda-cupti|cudnn-cu13|cusparselt-cu13)$")


def repack(dist: md.Distribution, wheels: pathlib.Path) -> pathlib.Path:
    base = pathlib.Path(str(dist.locate_file("")))
    wheel_meta = dist.read_text("WHEEL") or ""
    tag = next(line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:"))
    name = dist.metadata["Name"].lower().replace("-", "_")
    out = wheels / f"{name}-{dist.version}-{tag}.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for f in dist.files or []:
            p = base / f
            if p.is_file() and "__pycache__" not in str(f):
                z.write(p, str(f))
    return out


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    wheels = out / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for dist in md.distributions():
        if WANT.match(dist.metadata["Name"].lower()):
            w = repack(dist, wheels)
            print("repacked", w.name, w.stat().st_size // 2**20, "MiB")
    for more in sys.argv[2:]:
        for w in pathlib.Path(more).glob("*.whl"):
            (wheels / w.name).write_bytes(w.read_bytes())
    projects: dict[str, list[pathlib.Path]] = {}
    for w in sorted(wheels.glob("*.whl")):
        projects.setdefault(re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower(), []).append(w)
    for proj, ws in projects.items():
        d = out / "simple" / proj
        d.mkdir(parents=True, exist_ok=True)
        links = "\n".join(
            f'<a href="../../wheels/{html.escape(w.name)}#sha256={_sha256(w)}">{html.escape(w.name)}</a><br/>'
            for w in ws)
        (d / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}\n</body></html>\n")
    print("index:", sorted(projects))


if __name__ == "__main__":
    main()
