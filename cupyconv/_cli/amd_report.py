"""The AMD resource report (``compile-check --report``): per kernel and AMD target, registers,
LDS, scratch and spills, from the AMDGPU metadata of clang's assembly (-O3).  Needs clang, no GPU.
"""

from __future__ import annotations

import contextlib
import json
import sys
from concurrent.futures import ThreadPoolExecutor

from cupyconv._cli import compile_cache, compile_check, compilers

REPORT_ARCHS = ("gfx90a", "gfx942")  # compile-check --report: resources per kernel
_REPORT_FIELDS = (("VGPR", "vgpr_count"), ("AGPR", "agpr_count"), ("SGPR", "sgpr_count"),
                  ("LDS B", "group_segment_fixed_size"), ("scratch B", "private_segment_fixed_size"),
                  ("VGPR spill", "vgpr_spill_count"), ("SGPR spill", "sgpr_spill_count"),
                  ("wave", "wavefront_size"))


def resource_report(modules=None, archs=REPORT_ARCHS, workers=None) -> list[dict]:
    """Per kernel and target: registers, LDS, scratch and spills from clang's AMDGPU metadata
    (one compile per source text and target; the rows are cached like the check's results).
    Each row: ``arch``, ``source``, ``kernel`` (the name expression), the metadata fields."""
    modules = compile_check.select_modules() if modules is None else tuple(modules)
    units = compile_check._units([m for m in modules if "amd" in m.vendors])

    def one(job):
        unit, arch = job
        root = compile_cache.cache_root()
        path = None if root is None else root / (
            compile_cache.cache_key("clang", arch, unit.code, unit.name_expressions) + ".report.json")
        if path is not None and path.exists():
            with contextlib.suppress(OSError, ValueError):
                return json.loads(path.read_text())
        lowered, text = compilers.clang_compile(unit.code, unit.name_expressions, arch, assembly=True)
        by_name = {k["name"]: k for k in compilers.parse_amdgpu_metadata(text)}
        rows = [dict(arch=arch, source=unit.source, kernel=ne,
                     **{f: by_name.get(sym, {}).get(f) for _, f in _REPORT_FIELDS})
                for ne, sym in lowered.items()]
        if path is not None:
            with contextlib.suppress(OSError):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(rows))
        return rows

    jobs = [(u, a) for a in archs for u in units]
    with ThreadPoolExecutor(max_workers=workers or compile_check._cpu_count()) as pool:
        return [row for rows in pool.map(one, jobs) for row in rows]


def report_main(out=None, modules=None) -> int:
    """Print the resource report (``compile-check --report``); 0, or 1 when clang is missing or
    a compile fails."""
    out = sys.stdout if out is None else out
    print(f"per-kernel resources from clang's AMDGPU metadata for {', '.join(REPORT_ARCHS)} "
          f"(-O3; LDS and scratch in bytes per workgroup / lane)", file=out, flush=True)
    try:
        rows = resource_report(compile_check.select_modules(modules))
    except (compilers.CompilerMissing, RuntimeError) as exc:
        print(f"report failed: {exc}", file=out)
        return 1
    head = f"{'arch':7s} {'kernel':58s} " + " ".join(f"{h:>10s}" for h, _ in _REPORT_FIELDS)
    print(head + "\n" + "-" * len(head), file=out)
    for r in rows:
        name = r["kernel"] if len(r["kernel"]) <= 58 else r["kernel"][:55] + "..."
        print(f"{r['arch']:7s} {name:58s} "
              + " ".join(f"{'-' if r[f] is None else r[f]:>10}" for _, f in _REPORT_FIELDS), file=out)
    spills = [r for r in rows if (r["vgpr_spill_count"] or 0) + (r["sgpr_spill_count"] or 0)]
    print(f"{len(rows)} kernels; {len(spills)} with spills", file=out)
    return 0
