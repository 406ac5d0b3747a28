"""Names of CUDA return codes, from the headers' enums (generated.ENUMS,
which test_catalogue_headers.py compares with the installed headers)."""

from __future__ import annotations

import pytest

from cudaprobe.catalogue.enums import error_name, error_table


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
    assert all(name.startswith("cuda") for name in error_table("runtime").values())
    assert all(name.startswith("CUDA_") for name in error_table("driver").values())
