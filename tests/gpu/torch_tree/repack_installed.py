"""Repack installed nvidia-* distributions (files byte for byte, from their RECORD) into wheels,
then write a PEP 503 directory index of those wheels plus the carried ones."""
import hashlib, html, importlib.metadata as md, pathlib, re, sys, zipfile
out = pathlib.Path(sys.argv[1]); carried = [pathlib.Path(p) for p in sys.argv[2:]]
wheels = out / "wheels"; wheels.mkdir(parents=True, exist_ok=True)
want = re.compile(r"^nvidia-(cublas|cuda-runtime|cuda-nvrtc|cusparse|cusolver|curand|cufft|nvjitlink|nvtx|cuda-cupti|cudnn-cu13|cusparselt-cu13)$")
for dist in md.distributions():
    name = dist.metadata["Name"].lower()
    if not want.match(name):
        continue
    base = pathlib.Path(dist.locate_file(""))
    tag = next(l.split(":", 1)[1].strip() for l in dist.read_text("WHEEL").splitlines() if l.startswith("Tag:"))
    fn = f"{name.replace('-', '_')}-{dist.version}-{tag}.whl"
    with zipfile.ZipFile(wheels / fn, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for f in dist.files:
            p = base / f
            if p.is_file() and "__pycache__" not in str(f):
                z.write(p, str(f))
    print("repacked", fn, (wheels / fn).stat().st_size // 2**20, "MiB")
for c in carried:
    for w in c.glob("*.whl"):
        (wheels / w.name).write_bytes(w.read_bytes())
projects = {}
for w in sorted(wheels.glob("*.whl")):
    proj = re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower()
    projects.setdefault(proj, []).append(w)
for proj, ws in projects.items():
    d = out / "simple" / proj; d.mkdir(parents=True, exist_ok=True)
    links = "\n".join(f'<a href="../../wheels/{html.escape(w.name)}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{html.escape(w.name)}</a><br/>' for w in ws)
    (d / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}\n</body></html>\n")
print("index:", sorted(projects))
