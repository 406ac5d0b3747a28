"""The struct layouts that decode `const struct *` arguments (catalogue/structs.py)
against the CUDA headers: a C program prints each field's offset and size."""

from __future__ import annotations

import subprocess
from functools import cache

import pytest

from cudaprobe.catalogue.functions import CONFIG_MAX_BYTES, FUNCTIONS, ArgKind
from cudaprobe.catalogue.generated import ENUMS
from cudaprobe.catalogue.structs import LAYOUTS

from ..conftest import CUDA_HOME

SIZES = {"u8": 1, "u16": 2, "u32": 4, "s32": 4, "dim3": 12}


@cache
def c_layout(tmp_dir: str) -> dict[tuple[str, str], tuple[int, int]]:
    include = CUDA_HOME / "include"
    if not (include / "cuda.h").is_file():
        pytest.skip(f"{include}/cuda.h not found (CUDA toolkit missing)")
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <cuda.h>",
             "#include <cuda_runtime_api.h>", "int main(void) {"]
    for tag, layout in LAYOUTS.items():
        for field, _, _ in layout.fields:
            lines.append(f'printf("{tag} {field} %zu %zu\\n", offsetof({layout.c_name}, {field}),'
                         f" sizeof((({layout.c_name} *)0)->{field}));")
    lines.append("return 0; }")
    src, exe = f"{tmp_dir}/layout.c", f"{tmp_dir}/layout"
    with open(src, "w") as f:
        f.write("\n".join(lines))
    subprocess.run(["gcc", f"-I{include}", "-o", exe, src], check=True)
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return {(t, f): (int(o), int(s)) for t, f, o, s in (line.split() for line in out.splitlines())}


def test_field_offsets_and_widths_are_the_headers(tmp_path_factory):
    got = c_layout(str(tmp_path_factory.mktemp("layout")))
    for tag, layout in LAYOUTS.items():
        assert layout.length <= CONFIG_MAX_BYTES, tag
        for field, offset, kind in layout.fields:
            c_offset, c_size = got[(tag, field)]
            assert offset == c_offset, (tag, field)
            width = 4 if kind.startswith("enum:") else SIZES.get(kind, 8)
            assert width == c_size, (tag, field)
            assert not kind.startswith("enum:") or kind[5:] in ENUMS, (tag, field)
            # inside the window copied at entry
            assert layout.offset <= offset and offset + c_size <= layout.offset + layout.length


def test_every_layout_decodes_some_function():
    used = {a.type_name for f in FUNCTIONS for a in f.args if a.kind is ArgKind.STRUCT}
    assert used == set(LAYOUTS)
