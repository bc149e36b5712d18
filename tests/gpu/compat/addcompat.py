"""addcompat.py PREFIX SRC DRIVER CUDA_MM: copy a compat package's libraries (SRC: a compat/ folder,
NVIDIA's or mkcompat.py's stand-in) into PREFIX/compat and name it in the install record as
`install --with compat` does (a ProductRelease "compat", release = the driver, cuda_variant = CUDA_MM)."""
import json
import shutil
import sys
from pathlib import Path

prefix, src, driver, cuda_mm = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
shutil.copytree(src, prefix / "compat", symlinks=True)
record = prefix / ".cudaredist" / "record.json"
rec = json.loads(record.read_text())
rec["plan"].setdefault("products", []).append({"name": "compat", "release": driver, "cuda_variant": cuda_mm,
                                               "requested": "compat", "base_url": str(src)})
record.write_text(json.dumps(rec, indent=1))
print(f"{prefix}/compat: compat {driver} for CUDA {cuda_mm}, from {src}")
