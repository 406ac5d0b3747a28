"""The generated CUDA error-name tables and error_name()."""

from __future__ import annotations

import sys
from functools import cache
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path
from types import ModuleType

import pytest

from cudaprobe.catalogue import cuda_errors
from cudaprobe.catalogue.cuda_errors import DRIVER_ERRORS, RUNTIME_ERRORS, error_name

GENERATOR = Path(__file__).resolve().parents[2] / "scripts" / "gen-cuda-errors"
CUDA_INCLUDE_DIR = Path("/usr/local/cuda/include")


@cache
def load_generator() -> ModuleType:
    """Import scripts/gen-cuda-errors, which has no .py suffix."""
    loader = SourceFileLoader("gen_cuda_errors", str(GENERATOR))
    spec = spec_from_loader(loader.name, loader)
    assert spec is not None
    module = module_from_spec(spec)
    # dataclasses look their module up in sys.modules while it executes.
    sys.modules[loader.name] = module
    loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("api", "code", "name"),
    [
        ("runtime", 0, "cudaSuccess"),
        ("runtime", 35, "cudaErrorInsufficientDriver"),
        ("runtime", 100, "cudaErrorNoDevice"),
        ("runtime", 700, "cudaErrorIllegalAddress"),
        ("runtime", 999, "cudaErrorUnknown"),
        ("driver", 0, "CUDA_SUCCESS"),
        ("driver", 3, "CUDA_ERROR_NOT_INITIALIZED"),
        ("driver", 100, "CUDA_ERROR_NO_DEVICE"),
        ("driver", 700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
        ("driver", 999, "CUDA_ERROR_UNKNOWN"),
    ],
)
def test_names(api: str, code: int, name: str) -> None:
    assert error_name(api, code) == name


def test_unknown_codes_show_type_and_number() -> None:
    assert error_name("runtime", 12345) == "cudaError(12345)"
    assert error_name("driver", 12345) == "CUresult(12345)"
    assert error_name("runtime", -1) == "cudaError(-1)"


def test_unknown_api_is_refused() -> None:
    with pytest.raises(ValueError, match="runtime"):
        error_name("cublas", 0)


def test_tables_use_each_enum_naming_style() -> None:
    assert all(name.startswith("cuda") for name in RUNTIME_ERRORS.values())
    assert all(name.startswith("CUDA_") for name in DRIVER_ERRORS.values())


def test_parser_resolves_aliases_and_prefers_non_deprecated_names() -> None:
    generator = load_generator()
    header = """
    enum __device_builtin__ demoError {
        demoSuccess = 0,
        /** \\deprecated use demoNew */
        demoOld = 0x10u,
        demoNew = demoOld,      /**< same value, not deprecated */
        demoNext,
        demoShifted = (1 << 8) | 1
        /** \\deprecated */
        , demoLast = 999
    };
    """
    enumerators = generator.parse_enum(header, "demoError")
    assert [(e.name, e.value, e.deprecated) for e in enumerators] == [
        ("demoSuccess", 0, False),
        ("demoOld", 16, True),
        ("demoNew", 16, False),
        ("demoNext", 17, False),
        ("demoShifted", 257, False),
        ("demoLast", 999, True),
    ]
    assert generator.error_table(enumerators) == {
        0: "demoSuccess",
        16: "demoNew",
        17: "demoNext",
        257: "demoShifted",
        999: "demoLast",
    }


def test_parser_refuses_preprocessor_lines_in_enum() -> None:
    generator = load_generator()
    header = "enum e {\n a = 1,\n#if X\n b = 2,\n#endif\n};"
    with pytest.raises(ValueError, match="preprocessor"):
        generator.parse_enum(header, "e")


@pytest.mark.skipif(
    not (CUDA_INCLUDE_DIR / "cuda.h").exists(),
    reason=f"CUDA toolkit headers not installed in {CUDA_INCLUDE_DIR}",
)
def test_committed_tables_match_the_headers() -> None:
    tables = load_generator().read_error_tables(CUDA_INCLUDE_DIR)
    if tables.cuda_version != cuda_errors.CUDA_VERSION:
        pytest.skip(
            f"installed CUDA_VERSION {tables.cuda_version} differs from the "
            f"committed tables' {cuda_errors.CUDA_VERSION}; run "
            "scripts/gen-cuda-errors to regenerate"
        )
    assert tables.runtime == RUNTIME_ERRORS
    assert tables.driver == DRIVER_ERRORS
